"""AsyncDatabase: the ledger database on SQLAlchemy's asyncio extension."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from benchledger.aio import _sqlite
from benchledger.aio._bridge import _GreenletRLock, awaiting_outage, run_sync
from benchledger.db import Database, engine_options, parse_url, ping_idle_connections
from benchledger.db.engine import (
    SUPPORTED,
    check_driver,
    create_engine_checked,
    detect_lost_commands,
    split_pooler,
)
from benchledger.errors import DATABASE_UNSUPPORTED, LedgerError
from benchledger.faults import Outage, OutagePolicy

#: Sync driver -> the async driver AsyncDatabase uses for it.
_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
    "postgresql+psycopg_async": "postgresql+psycopg_async",
}


def async_url(url: str | sa.URL | None = None) -> sa.URL:
    """The URL with its async driver: aiosqlite for SQLite, psycopg (async mode) for PostgreSQL.

    ``None`` means ``BENCHLEDGER_DATABASE_URL``, else the embedded default,
    as for :class:`~benchledger.db.Database`; refusals are Database's
    (``ledger.database.url_invalid``, ``ledger.database.unsupported``).
    """
    parsed = parse_url(url)
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        check_driver(parsed, _ASYNC_DRIVERS.keys(), "AsyncDatabase")  # url_invalid if unknown
        raise LedgerError(
            DATABASE_UNSUPPORTED,
            f"{parsed.drivername[:40]!r} has no asyncio driver here: "
            f"use sqlite:/// (aiosqlite) or postgresql+psycopg://; {SUPPORTED}",
        )
    return parsed.set(drivername=driver)


class _LoopDatabase(Database):
    """The sync face of an AsyncDatabase: a Database over the async engine's sync_engine.

    On SQLite, this process's write transactions first queue on an asyncio
    lock (FIFO, in the event loop) and only then ask SQLite for its write lock,
    as a Database's threads queue on a thread lock: SQLite admits one writer at
    a time anyway, and K cases waiting in its busy handler (which sleeps and
    polls) would leave the lock idle between writers. Other processes still
    share the lock through SQLite.
    """

    def __init__(self, engine: sa.Engine, url: sa.URL, transaction_pooling: bool) -> None:
        super().__init__(engine=engine)
        self.url = url.render_as_string(hide_password=False)  # with the pooler option
        self.transaction_pooling = transaction_pooling
        if self.dialect_name == "sqlite":
            # A thread lock would block the event loop's thread: greenlets queue here.
            self._write_gate = _GreenletRLock()


class AsyncDatabase:
    """One ledger database for asyncio code: an async engine, and its sync face.

    ``url`` is the same URL a :class:`~benchledger.db.Database` takes
    (``sqlite:///ledger.db``, ``postgresql+psycopg://...``); the async driver
    is chosen from it (aiosqlite; psycopg's async mode). ``async_engine`` is
    the :class:`~sqlalchemy.ext.asyncio.AsyncEngine` for your own queries.

    ``sync`` is a :class:`~benchledger.db.Database` over the async engine's
    ``sync_engine`` (the same pool, the same SQLite setup: foreign keys, busy
    timeout, ``BEGIN IMMEDIATE`` for writes; on SQLite this process's writers
    queue in the event loop before they ask SQLite). benchledger's services run on it
    inside SQLAlchemy's greenlet bridge (:meth:`run_sync`), so the async API
    executes exactly the statements and rules of the sync one. Use ``sync``
    only from code that :meth:`run_sync` runs.

    ``pool_size`` sizes a PostgreSQL pool (as for ``Database``); a few
    connections serve many cases, since each holds one only for a statement
    or two. On SQLite the pool is two connections whatever ``pool_size``.

    Behind a PgBouncer in transaction mode, the URL's
    ``benchledger_pooler=transaction`` works as for ``Database``: no server-side
    prepared statements, :attr:`supports_listen` ``False``.
    """

    def __init__(
        self, url: str | sa.URL | None = None, *, echo: bool = False, pool_size: int | None = None
    ) -> None:
        requested = async_url(url)
        parsed, transaction_pooling = split_pooler(requested)
        options = engine_options(
            parsed, echo=echo, pool_size=pool_size, transaction_pooling=transaction_pooling
        )
        # As Database does: ping only connections that sat idle, not one per checkout.
        idle_ping = options.pop("pool_pre_ping", False)
        if parsed.get_backend_name() == "sqlite":
            # aiosqlite runs each connection in a thread of its own, and SQLite admits
            # one writer at a time: two connections (a writer, a reader) serve any K
            # best; every extra thread only contends for the GIL (measured: 600 items,
            # K=64, 4 connections -> 2: 110-127 -> 160 items/s).
            options.update(pool_size=1, max_overflow=1)
            connect_args: dict[str, Any] = options.pop("connect_args", {})
            options["async_creator"] = lambda: self._connect_sqlite(connect_args)
        self.async_engine: AsyncEngine = create_engine_checked(create_async_engine, parsed, options)
        if idle_ping:
            ping_idle_connections(self.async_engine.sync_engine)
            detect_lost_commands(self.async_engine.sync_engine)
        self.sync: Database = _LoopDatabase(
            self.async_engine.sync_engine, requested, transaction_pooling
        )
        self.url = self.sync.url
        self.dialect_name = self.sync.dialect_name
        self.transaction_pooling = transaction_pooling
        """As :attr:`Database.transaction_pooling`."""

    @property
    def supports_listen(self) -> bool:
        """As :attr:`Database.supports_listen`: PostgreSQL, not through a
        transaction-pooling PgBouncer."""
        return self.sync.supports_listen

    def _connect_sqlite(self, connect_args: dict[str, Any]) -> _sqlite.OneHopConnection:
        """A new SQLite connection: the URL's arguments and ours, one thread hop per statement."""
        sync_engine = self.async_engine.sync_engine
        args, kwargs = sync_engine.dialect.create_connect_args(sync_engine.url)
        return _sqlite.connector(*args, **{**kwargs, **connect_args})

    def __repr__(self) -> str:
        return f"AsyncDatabase({sa.make_url(self.url).render_as_string(hide_password=True)!r})"

    async def run_sync(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Await sync code (``function(*args, **kwargs)``) that uses :attr:`sync`."""
        return await run_sync(function, *args, **kwargs)

    async def upgrade(
        self, revision: str = "head", *, outage: Outage | OutagePolicy | None = None
    ) -> None:
        """Upgrade the schema (default: to head), as :meth:`Database.upgrade` (the same
        outage budget; its waits are awaited)."""
        await run_sync(self.sync.upgrade, revision, outage=awaiting_outage(outage))

    async def downgrade(self, revision: str) -> None:
        await run_sync(self.sync.downgrade, revision)

    async def current_revision(self) -> str | None:
        return await run_sync(self.sync.current_revision)

    async def require_current_schema(self, *, outage: Outage | OutagePolicy | None = None) -> None:
        """As :meth:`Database.require_current_schema` (the same outage budget, awaited)."""
        await run_sync(self.sync.require_current_schema, outage=awaiting_outage(outage))

    async def dispose(self) -> None:
        await self.async_engine.dispose()

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.dispose()
