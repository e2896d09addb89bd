"""The database: ``Database`` (engine, read and write transactions, the kept writer,
its schema) and ``current_session``, the session of the transaction open here."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from benchledger.db import engine as _engine
from benchledger.db import schema
from benchledger.db.engine import (
    KEPT_WRITER_OPTION,
    SYNC_DRIVERS,
    WRITE_OPTION,
    begin_immediate,
    check_driver,
    configure_sqlite,
    create_engine_checked,
    detect_lost_commands,
    enable_sqlite_wal,
    engine_options,
    keep_temp_files_in_memory,
    parse_url,
    ping_idle_connections,
    split_pooler,
)
from benchledger.errors import DATABASE_OPTIONS_INVALID, LedgerError
from benchledger.faults import Outage, OutagePolicy, start_up

#: The session of the innermost :meth:`Database.read` / :meth:`Database.write` in this context.
_CURRENT_SESSION: ContextVar[Session | None] = ContextVar("benchledger_session", default=None)


def current_session() -> Session:
    """The session of the transaction open here (the innermost ``read()`` or ``write()``).

    The default study adapters store through it, so they take part in the
    service's one transaction while their ports speak only domain values.
    """
    session = _CURRENT_SESSION.get()
    if session is None:
        raise RuntimeError("No benchledger transaction is open here (Database.read/write).")
    return session


@contextmanager
def _current(session: Session) -> Iterator[Session]:
    token = _CURRENT_SESSION.set(session)
    try:
        yield session
    finally:
        _CURRENT_SESSION.reset(token)


class Database:
    """One ledger database: an engine, read and write sessions, and its schema.

    ``url`` is any SQLAlchemy URL; ``None`` means ``BENCHLEDGER_DATABASE_URL``
    or, failing that, ``sqlite:///benchledger.db``. ``postgresql://`` URLs use
    psycopg 3. ``pool_size`` sizes the connection pool (see
    :func:`engine_options`). ``engine`` wraps an engine made elsewhere instead
    of creating one (benchledger's own SQLite setup is attached to it):
    :class:`benchledger.aio.AsyncDatabase` passes its async engine's
    ``sync_engine``.

    Nothing is connected here. A URL that is not a string or does not parse is
    ``ledger.database.url_invalid``; a backend or driver benchledger does not run
    on (``mysql://``, ``sqlite+aiosqlite://``: see ``AsyncDatabase``) is
    ``ledger.database.unsupported``; a missing driver ``ledger.database.driver_missing``;
    a ``pool_size`` that is not an int from 1 to 1000 (or ``echo`` not a bool) is
    ``ledger.database.options_invalid``.

    Behind a PgBouncer in transaction mode, add ``benchledger_pooler=transaction``
    to a PostgreSQL URL's query
    (``postgresql+psycopg://u@bouncer:6432/db?benchledger_pooler=transaction``):
    psycopg then never prepares statements on the server, and
    :attr:`supports_listen` is ``False``. ``url`` keeps the option, so worker
    processes started with it connect the same way; the driver never sees it.
    Any other value, or the option on a SQLite URL, is
    ``ledger.database.url_invalid``. benchledger keeps no other session state on
    PostgreSQL: its locks are transaction-scoped and it changes no session setting.
    """

    def __init__(
        self,
        url: str | sa.URL | None = None,
        *,
        echo: bool = False,
        pool_size: int | None = None,
        engine: sa.Engine | None = None,
    ) -> None:
        self.transaction_pooling = False
        """Whether the URL says a transaction-pooling PgBouncer sits in front of
        PostgreSQL (``benchledger_pooler=transaction``): no server-side prepared
        statements, no session state, no LISTEN."""
        if engine is not None:
            if not isinstance(engine, sa.Engine):
                raise LedgerError(DATABASE_OPTIONS_INVALID, "engine must be a sqlalchemy Engine")
            parsed = engine.url
            self.url = parsed.render_as_string(hide_password=False)
            self.engine = engine
        else:
            parsed = parse_url(url)
            check_driver(parsed, SYNC_DRIVERS, "Database")
            self.url = parsed.render_as_string(hide_password=False)  # with the pooler option
            parsed, self.transaction_pooling = split_pooler(parsed)
            options = engine_options(
                parsed,
                echo=echo,
                pool_size=pool_size,
                transaction_pooling=self.transaction_pooling,
            )
            idle_ping = options.pop("pool_pre_ping", False)
            self.engine = create_engine_checked(sa.create_engine, parsed, options)
            if idle_ping:  # PostgreSQL: ping only connections that sat idle
                ping_idle_connections(self.engine)
                detect_lost_commands(self.engine)
        self.dialect_name = parsed.get_backend_name()
        if self.dialect_name == "sqlite":
            configure_sqlite(self.engine)
        self.write_engine: sa.Engine = self.engine.execution_options(**{WRITE_OPTION: True})
        """The engine for write transactions (``BEGIN IMMEDIATE`` on SQLite); same pool."""
        self._write_gate: AbstractContextManager[Any] = (
            threading.RLock() if self.dialect_name == "sqlite" else nullcontext()
        )
        """SQLite: this process's writers queue here (FIFO-ish, no polling) before they
        ask SQLite for its write lock, which admits one writer at a time anyway: threads
        sleeping in SQLite's busy handler would leave the lock idle between writers."""
        self._keeps_writer = engine is None and (
            self.dialect_name == "postgresql" or self.sqlite_path is not None
        )
        """Its own engine, a server or a SQLite file: ``write_connection`` keeps one
        Connection between its transactions (see ``_kept_write``)."""
        self._writer: sa.Connection | None = None
        self._writer_pid = 0
        self._writer_pool: sa.Pool | None = None
        self._writer_idle_since = 0.0
        self._writer_free = threading.Lock()
        self._read_sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(self.write_engine, expire_on_commit=False)
        self._schema_checked = False

    def __repr__(self) -> str:
        return f"Database({sa.make_url(self.url).render_as_string(hide_password=True)!r})"

    @property
    def supports_listen(self) -> bool:
        """Whether a connection of this database can ``LISTEN`` for notifications:
        PostgreSQL reached directly (or through a session-pooling PgBouncer). Not on
        SQLite, and not through a transaction-pooling PgBouncer
        (``benchledger_pooler=transaction``): there a ``LISTEN`` registers on
        whichever server connection runs that transaction, which then serves
        other clients, so the notifications never reach the listener. Where this
        is ``False``, wait by polling."""
        return self.dialect_name == "postgresql" and not self.transaction_pooling

    @property
    def sqlite_path(self) -> Path | None:
        """The file of a file-backed SQLite database, else ``None``."""
        if self.dialect_name != "sqlite":
            return None
        database = sa.make_url(self.url).database
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        return Path(database)

    # -- sessions -----------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in one write transaction: committed on success, else rolled back.

        On SQLite the transaction starts with ``BEGIN IMMEDIATE``, so writers
        queue on the busy timeout instead of failing midway on a lock upgrade.
        """
        with (
            self._write_gate,
            self._write_sessions() as session,
            session.begin(),
            _current(session),
        ):
            yield session

    @contextmanager
    def write_connection(self) -> Iterator[sa.Connection]:
        """A Connection in one write transaction, for the hot path (no ORM Session).

        Committed on success, else rolled back; on SQLite it starts with
        ``BEGIN IMMEDIATE``, so the write lock is held once this is entered.
        """
        with self._write_gate:
            if self._keeps_writer and self._writer_free.acquire(blocking=False):
                try:
                    with self._kept_write() as connection:
                        yield connection
                finally:
                    self._writer_free.release()
            else:
                with self.write_engine.begin() as connection:
                    yield connection

    @contextmanager
    def _kept_write(self) -> Iterator[sa.Connection]:
        """One write transaction on the kept Connection, saving a pool checkout and
        check-in per transaction (the hot path's are short and many).

        One thread at a time uses it (``_writer_free``; any other writer meanwhile,
        or a nested one, takes a pooled connection, never waits). It goes back to
        the pool after a failed transaction, and on PostgreSQL when it sat idle
        longer than ``POSTGRES_PING_IDLE_SECONDS`` (the pool pings such a one on
        checkout). On SQLite ``BEGIN IMMEDIATE`` comes after every ``begin``
        listener ran (the testing kit commits its own session in one).
        """
        connection, self._writer = self._writer, None
        if connection is not None and (
            self._writer_pid != os.getpid()
            or self._writer_pool is not self.engine.pool  # the engine was disposed
            or (
                self.dialect_name == "postgresql"
                and time.monotonic() - self._writer_idle_since > _engine.POSTGRES_PING_IDLE_SECONDS
            )
        ):
            if self._writer_pid == os.getpid():
                connection.close()
            connection = None
        pool = self._writer_pool
        if connection is None:
            pool = self.engine.pool
            connection = self.engine.connect().execution_options(**{KEPT_WRITER_OPTION: True})
            if self.dialect_name == "sqlite":
                keep_temp_files_in_memory(connection)
        try:
            with connection.begin():
                if self.dialect_name == "sqlite":
                    begin_immediate(connection)
                yield connection
        except BaseException:
            connection.close()
            raise
        self._writer, self._writer_pid = connection, os.getpid()
        self._writer_pool = pool
        self._writer_idle_since = time.monotonic()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; it never takes SQLite's write lock."""
        with self._read_sessions() as session, session.begin(), _current(session):
            yield session

    def dispose(self) -> None:
        with self._write_gate:
            writer, self._writer = self._writer, None
            if writer is not None and self._writer_pid == os.getpid():
                writer.close()
        self.engine.dispose()

    # -- schema -------------------------------------------------------------

    @contextmanager
    def migration_connection(self) -> Iterator[sa.Connection]:
        """A connection in one transaction that holds the migration lock.

        PostgreSQL: a transaction-scoped advisory lock. SQLite: the database's
        write lock (``BEGIN IMMEDIATE``). Either way, concurrent upgraders queue
        and the later ones find the schema at head.
        """
        with self.write_engine.connect() as connection, connection.begin():
            schema.lock_migrations(connection)
            yield connection
        if self.dialect_name == "sqlite" and self.sqlite_path is not None:
            # WAL is persistent in the file; set it only once the schema is ours.
            enable_sqlite_wal(self.engine)

    def upgrade(
        self, revision: str = "head", *, outage: Outage | OutagePolicy | None = None
    ) -> None:
        """Upgrade the schema (default: to head), adopting a legacy database.

        A database a newer benchledger upgraded is refused with
        ``ledger.schema.ahead``, not Alembic's "can't locate revision".

        A database that is down or restarting is waited for within ``outage``
        (default :data:`~benchledger.faults.STARTUP_OUTAGE`, a few seconds): the
        upgrade runs in one transaction, so a try a fault cut short left nothing
        and is run again. Then ``ledger.database.unavailable``; never a raw
        SQLAlchemy error.
        """
        start_up(
            "the schema upgrade",
            lambda: schema.upgrade(self.engine, self.migration_connection, revision),
            outage,
        )
        self._schema_checked = False

    def downgrade(self, revision: str) -> None:
        schema.downgrade(self.engine, self.migration_connection, revision)
        self._schema_checked = False

    def current_revision(self) -> str | None:
        return schema.current_revision(self.engine)

    def require_current_schema(self, *, outage: Outage | OutagePolicy | None = None) -> None:
        """Refuse to run services on a schema behind or ahead of this version's head.

        The revision is read through transient faults within ``outage`` (default
        :data:`~benchledger.faults.STARTUP_OUTAGE`), then
        ``ledger.database.unavailable``; never a raw SQLAlchemy error.
        """
        if self._schema_checked:
            return
        start_up("the schema check", lambda: schema.require_current_schema(self.engine), outage)
        self._schema_checked = True
