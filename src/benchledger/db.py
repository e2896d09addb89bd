"""The database: engine, sessions, dialect setup, schema upgrade and legacy adoption."""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from benchledger.errors import SCHEMA_AHEAD, SCHEMA_BEHIND, SCHEMA_UNKNOWN, SchemaError

if TYPE_CHECKING:  # alembic is imported by the functions that use it: most callers never do
    from alembic.config import Config
    from alembic.script import ScriptDirectory

URL_ENV = "BENCHLEDGER_DATABASE_URL"
DEFAULT_URL = "sqlite:///benchledger.db"
VERSION_TABLE = "benchledger_alembic_version"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0

# Any constant works; it only has to be the same in every process that upgrades.
_PG_MIGRATION_LOCK_KEY = 0x62656E63686C6467  # "benchldg"
_WRITE_OPTION = "benchledger_write"
_KEPT_WRITER_OPTION = "benchledger_kept_writer"
#: PostgreSQL serialization failure and deadlock: safe to run the whole transaction again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})

_T = TypeVar("_T")

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


# -- helpers every repository and service shares ----------------------------------------


def insert_if_absent(
    session: Session | sa.Connection,
    table: sa.Table | type[DeclarativeBase],
    values: dict[str, Any],
) -> bool:
    """``INSERT ... ON CONFLICT DO NOTHING`` (content-addressed rows); True when inserted."""
    statement: Any
    dialect = (
        session.get_bind().dialect.name if isinstance(session, Session) else session.dialect.name
    )
    if dialect == "postgresql":
        statement = postgresql.insert(table).values(**values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        statement = sqlite.insert(table).values(**values).on_conflict_do_nothing()
    else:  # pragma: no cover - only the two supported backends
        raise NotImplementedError(dialect)
    # SQLAlchemy 2.1 keeps an INSERT's rowcount only when asked (else PostgreSQL says -1).
    options = {"preserve_rowcount": True}
    result = cast(sa.CursorResult[Any], session.execute(statement, execution_options=options))
    return result.rowcount == 1


class Prebuilt:
    """A Core statement compiled once per dialect, then run with ``exec_driver_sql``.

    ``Connection.execute`` of even a cached statement walks the statement for its
    cache key, builds its parameters and sets up result processing, on every call:
    on the hot path that costs more than the database's own work. A prebuilt
    statement keeps, per dialect, the compiled SQL, the order of its parameters
    (positional drivers), the values of its constants and the bind processors
    of its types; a call only lays out the caller's values. Events
    (``before_cursor_execute``), error wrapping and transactions are the
    Connection's, as for any statement. Rows come back as the driver gives them
    (no result processing): use it for text, numbers and floats.
    """

    def __init__(self, statement: sa.Executable) -> None:
        self.statement = statement
        self._forms: dict[tuple[str, str], PrebuiltForm] = {}

    def __call__(
        self, connection: sa.Connection, parameters: dict[str, Any]
    ) -> sa.CursorResult[*tuple[Any, ...]]:
        form = self.form(connection.dialect)
        return connection.exec_driver_sql(form.sql, form.arguments(parameters))

    def form(self, dialect: sa.Dialect) -> PrebuiltForm:
        """The statement as compiled for ``dialect`` (once; later calls reuse it)."""
        key = (dialect.name, dialect.driver)
        form = self._forms.get(key)
        if form is None:
            form = self._forms[key] = PrebuiltForm.compile(self.statement, dialect)
        return form


@attrs.frozen
class PrebuiltForm:
    """A statement's SQL for one dialect and how to lay out its parameters."""

    sql: str
    order: tuple[str, ...] | None  # positional drivers: the parameters' names in order
    constants: dict[str, Any]
    processors: tuple[tuple[str, Callable[[Any], Any]], ...]

    @classmethod
    def compile(cls, statement: sa.Executable, dialect: sa.Dialect) -> PrebuiltForm:
        compiled = cast(Any, statement).compile(dialect=dialect)
        if compiled.escaped_bind_names or "POSTCOMPILE" in compiled.string:
            raise NotImplementedError("a prebuilt statement takes plain bound parameters")
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        processors = []
        for name, bind in binds.items():
            process = bind.type.bind_processor(dialect)
            if process is not None:
                processors.append((name, process))
        return cls(
            sql=compiled.string,
            order=tuple(compiled.positiontup) if compiled.positional else None,
            constants={name: bind.value for name, bind in binds.items() if not bind.required},
            processors=tuple(processors),
        )

    def arguments(self, parameters: dict[str, Any]) -> Any:
        """The driver's parameters: the constants and ``parameters``, processed, in order."""
        values = {**self.constants, **parameters}
        for name, process in self.processors:
            values[name] = process(values[name])
        return values if self.order is None else tuple(values[name] for name in self.order)


def consistent_snapshot(session: Session) -> None:
    """Make the session's read transaction one snapshot (call before any statement).

    SQLite read transactions already are (WAL, deferred BEGIN). PostgreSQL's
    default READ COMMITTED takes a new snapshot per statement, so a read that
    looks at several tables uses REPEATABLE READ instead (reads never block writers).
    """
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def retry_lost_races(
    attempt: Callable[[], _T], *, attempts: int, collided: Callable[[], Exception]
) -> _T:
    """Run one whole transaction, ``attempt()``, again when it lost a race to another writer.

    A lost race is a unique violation (a concurrent writer inserted the same
    key or content first: the next attempt finds it and replays) or, on
    PostgreSQL, a serialization failure or deadlock. After ``attempts`` tries
    a collision raises ``collided()``; any other error propagates at once.
    """
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except sa.exc.IntegrityError:
            if number == attempts:
                raise collided() from None
        except sa.exc.OperationalError as error:
            if getattr(error.orig, "sqlstate", None) not in RETRYABLE_SQLSTATES:
                raise
            if number == attempts:
                raise
    raise AssertionError("unreachable")


def resolve_url(url: str | sa.URL | None = None) -> str:
    """The URL to use: the argument, else ``BENCHLEDGER_DATABASE_URL``, else the default."""
    if url is None:
        url = os.environ.get(URL_ENV) or DEFAULT_URL
    parsed = sa.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def migrations_dir() -> Path:
    """The Alembic script directory: inside the installed package, else the source tree."""
    packaged = Path(__file__).resolve().parent / "_migrations"
    if (packaged / "env.py").is_file():
        return packaged
    source_tree = Path(__file__).resolve().parents[2] / "migrations"
    if (source_tree / "env.py").is_file():
        return source_tree
    raise SchemaError(SCHEMA_UNKNOWN, "benchledger's migrations are missing from this install")


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_table", VERSION_TABLE)
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise SchemaError(SCHEMA_UNKNOWN, "benchledger has no migrations")
    return head


def engine_options(
    url: sa.URL, *, echo: bool = False, pool_size: int | None = None
) -> dict[str, Any]:
    """The keyword arguments benchledger creates its engines with (sync and asyncio alike).

    SQLite: the busy timeout. PostgreSQL: ``pool_pre_ping``. ``pool_size``
    (optional) sizes the connection pool: that many kept, as many more on
    demand (a worker with K cases in flight wants about 2 x K).
    """
    options: dict[str, Any] = {"echo": echo}
    if url.get_backend_name() == "sqlite":
        options["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
    else:
        options["pool_pre_ping"] = True
    if pool_size is not None:
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError("pool_size must be a positive integer")
        options["pool_size"] = pool_size
        options["max_overflow"] = pool_size
    return options


#: A pooled PostgreSQL connection idle for longer than this is pinged when it is
#: checked out (one round trip); one checked in more recently is trusted, so a
#: hot loop of short transactions (claim, complete) pays no ping per transaction.
#: A connection that died in between fails its next statement: a transient fault
#: (benchledger.faults), which workers retry on a fresh connection.
POSTGRES_PING_IDLE_SECONDS = 1.0
_IDLE_SINCE = "benchledger_idle_since"


def _ping_idle_connections(engine: sa.Engine) -> None:
    """``pool_pre_ping`` for connections idle longer than ``POSTGRES_PING_IDLE_SECONDS``
    (SQLAlchemy's custom pessimistic-disconnect recipe: a failed ping raises
    ``DisconnectionError`` and the pool retries with a new connection)."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since <= POSTGRES_PING_IDLE_SECONDS:
            return  # new, or used a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise sa.exc.DisconnectionError(str(error)) from error


def _configure_sqlite(engine: sa.Engine) -> None:
    """SQLAlchemy's pysqlite recipe: we emit BEGIN ourselves, IMMEDIATE for writes."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let the "begin" hook own BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        options = connection.get_execution_options()
        if options.get(_KEPT_WRITER_OPTION):
            return  # Database._kept_write begins it, once every "begin" listener has run
        if options.get(_WRITE_OPTION):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            connection.exec_driver_sql("BEGIN")


def _begin_immediate(connection: sa.Connection) -> None:
    """``BEGIN IMMEDIATE`` straight on the driver's connection (a statement through
    SQLAlchemy costs as much as the transaction's own work); a failure is wrapped as
    SQLAlchemy wraps any (``OperationalError`` for a busy database).

    While another process holds the write lock it asks again every millisecond or
    so (up to the busy timeout) instead of through SQLite's busy handler, whose
    sleeps grow to 100 ms: a process writing in a tight loop releases the lock for
    well under that, and would otherwise keep it from the others for as long as
    it has work.
    """
    driver = connection.connection.driver_connection
    if not isinstance(driver, sqlite3.Connection):  # another SQLite driver
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        return
    (busy_ms,) = driver.execute("PRAGMA busy_timeout").fetchone()
    deadline = time.monotonic() + busy_ms / 1000
    driver.execute("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:
                driver.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
            time.sleep(random.uniform(0.0002, 0.002))
    except sqlite3.Error as error:
        raise sa.exc.DBAPIError.instance(
            "BEGIN IMMEDIATE", (), error, sqlite3.Error, dialect=connection.dialect
        ) from error
    finally:
        driver.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")


class Database:
    """One ledger database: an engine, read and write sessions, and its schema.

    ``url`` is any SQLAlchemy URL; ``None`` means ``BENCHLEDGER_DATABASE_URL``
    or, failing that, ``sqlite:///benchledger.db``. ``postgresql://`` URLs use
    psycopg 3. ``pool_size`` sizes the connection pool (see
    :func:`engine_options`). ``engine`` wraps an engine made elsewhere instead
    of creating one (benchledger's own SQLite setup is attached to it):
    :class:`benchledger.aio.AsyncDatabase` passes its async engine's
    ``sync_engine``.
    """

    def __init__(
        self,
        url: str | sa.URL | None = None,
        *,
        echo: bool = False,
        pool_size: int | None = None,
        engine: sa.Engine | None = None,
    ) -> None:
        if engine is not None:
            parsed = engine.url
            self.url = parsed.render_as_string(hide_password=False)
            self.engine = engine
        else:
            self.url = resolve_url(url)
            parsed = sa.make_url(self.url)
            options = engine_options(parsed, echo=echo, pool_size=pool_size)
            idle_ping = options.pop("pool_pre_ping", False)
            self.engine = sa.create_engine(parsed, **options)
            if idle_ping:  # PostgreSQL: ping only connections that sat idle
                _ping_idle_connections(self.engine)
        self.dialect_name = parsed.get_backend_name()
        if self.dialect_name == "sqlite":
            _configure_sqlite(self.engine)
        self.write_engine: sa.Engine = self.engine.execution_options(**{_WRITE_OPTION: True})
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
                and time.monotonic() - self._writer_idle_since > POSTGRES_PING_IDLE_SECONDS
            )
        ):
            if self._writer_pid == os.getpid():
                connection.close()
            connection = None
        pool = self._writer_pool
        if connection is None:
            pool = self.engine.pool
            connection = self.engine.connect().execution_options(**{_KEPT_WRITER_OPTION: True})
        try:
            with connection.begin():
                if self.dialect_name == "sqlite":
                    _begin_immediate(connection)
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
            if self.dialect_name == "postgresql":
                connection.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"),
                    {"key": _PG_MIGRATION_LOCK_KEY},
                )
            yield connection
        if self.dialect_name == "sqlite" and self.sqlite_path is not None:
            # WAL is persistent in the file; set it only once the schema is ours.
            self._enable_wal()

    def _enable_wal(self) -> None:
        # Switching journal mode needs the file to itself and SQLite does not
        # always wait for it on the busy timeout, so retry while other
        # processes (often upgrading at the same moment) still hold it.
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_SECONDS
        raw = self.engine.raw_connection()
        try:
            while True:
                cursor = raw.cursor()
                try:
                    cursor.execute("PRAGMA journal_mode = WAL")
                    mode = cursor.fetchone()  # DB-API: aiosqlite's execute returns no cursor
                    if mode is not None and str(mode[0]).lower() == "wal":
                        return
                except sqlite3.OperationalError:
                    if time.monotonic() > deadline:
                        raise
                finally:
                    cursor.close()
                if time.monotonic() > deadline:
                    raise SchemaError(SCHEMA_UNKNOWN, "SQLite refused to switch to WAL mode")
                time.sleep(0.05)
        finally:
            raw.close()

    def upgrade(self, revision: str = "head") -> None:
        """Upgrade the schema (default: to head), adopting a legacy database.

        A database a newer benchledger upgraded is refused with
        ``ledger.schema.ahead``, not Alembic's "can't locate revision".
        """
        from alembic import command

        self._refuse_unknown_revision()
        self._run_alembic(command.upgrade, revision)
        self._schema_checked = False

    def downgrade(self, revision: str) -> None:
        from alembic import command

        self._refuse_unknown_revision()
        self._run_alembic(command.downgrade, revision)
        self._schema_checked = False

    def _refuse_unknown_revision(self) -> None:
        from alembic.script import ScriptDirectory

        current = self.current_revision()
        script = ScriptDirectory.from_config(alembic_config())
        if current is not None and not _is_known_revision(script, current):
            raise SchemaError(
                SCHEMA_AHEAD,
                f"the database schema is at {current}, newer than this benchledger "
                f"({head_revision()}): upgrade benchledger",
            )

    def _run_alembic(self, operation: Any, revision: str) -> None:
        config = alembic_config()
        with self.migration_connection() as connection:
            config.attributes["connection"] = connection
            operation(config, revision)

    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()

    def require_current_schema(self) -> None:
        """Refuse to run services on a schema behind or ahead of this version's head."""
        if self._schema_checked:
            return
        current = self.current_revision()
        head = head_revision()
        if current != head:
            from alembic.script import ScriptDirectory

            script = ScriptDirectory.from_config(alembic_config())
            known = current is not None and _is_known_revision(script, current)
            if current is None or known:
                raise SchemaError(
                    SCHEMA_BEHIND,
                    f"the database schema is at {current or 'nothing'}, behind {head}: "
                    "run `benchledger db upgrade`",
                )
            raise SchemaError(
                SCHEMA_AHEAD,
                f"the database schema is at {current}, newer than this benchledger "
                f"({head}): upgrade benchledger",
            )
        self._schema_checked = True


def _is_known_revision(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except Exception:
        return False
