"""Engines: the URL, engine options and each backend's connection setup.

SQLite: foreign keys and the busy timeout on connect, ``BEGIN`` emitted by
benchledger (``BEGIN IMMEDIATE`` for writes, asked again every millisecond
or so on the kept writer), WAL. PostgreSQL: psycopg 3, and a ping only for
pooled connections that sat idle (``ping_idle_connections``, which
:class:`benchledger.aio.AsyncDatabase` attaches to its engine too).

Behind a transaction-pooling PgBouncer (the URL's ``benchledger_pooler=transaction``,
:func:`split_pooler`), psycopg never prepares statements on the server: each
transaction may run on another server connection, where a statement prepared
on the last one does not exist.
"""

from __future__ import annotations

import os
import random
import re
import sqlite3
import time
from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from benchledger.errors import (
    DATABASE_DRIVER_MISSING,
    DATABASE_OPTIONS_INVALID,
    DATABASE_UNSUPPORTED,
    DATABASE_URL_INVALID,
    SCHEMA_UNKNOWN,
    LedgerError,
    SchemaError,
)

URL_ENV = "BENCHLEDGER_DATABASE_URL"
DEFAULT_URL = "sqlite:///benchledger.db"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0

#: Execution option of the write engine: SQLite begins its transactions IMMEDIATE.
WRITE_OPTION = "benchledger_write"
#: Execution option of the kept writer, whose BEGIN IMMEDIATE ``Database`` sends itself.
KEPT_WRITER_OPTION = "benchledger_kept_writer"
#: A pooled SQLite connection's flag: it keeps its temporary files in memory until it
#: goes back to the pool (:func:`keep_temp_files_in_memory`).
_TEMP_IN_MEMORY = "benchledger_temp_in_memory"


#: What benchledger runs on, said in every refusal of a URL.
SUPPORTED = (
    "benchledger runs on SQLite (sqlite:///PATH) and PostgreSQL "
    "(postgresql+psycopg://USER:PASSWORD@HOST/DB, psycopg 3: pip install 'psycopg[binary]')"
)
#: The drivers ``Database`` runs on (``postgresql://`` means psycopg 3).
SYNC_DRIVERS = frozenset({"sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg"})
#: The longest URL accepted (a URL is configuration, not data).
MAX_URL_LENGTH = 4096
#: The largest ``pool_size`` accepted (a PostgreSQL server admits a few hundred sessions).
MAX_POOL_SIZE = 1000

#: The URL query option that says a connection pooler sits between benchledger and
#: PostgreSQL (``?benchledger_pooler=transaction``); benchledger reads it and takes it
#: off the URL before the driver sees it.
POOLER_OPTION = "benchledger_pooler"
#: Its one value: a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``).
TRANSACTION_POOLING = "transaction"


def parse_url(url: object = None) -> sa.URL:
    """The URL to use, parsed: the argument, else ``BENCHLEDGER_DATABASE_URL``, else the
    default; ``postgresql://`` becomes ``postgresql+psycopg://``.

    A URL that is not a string (or ``sqlalchemy.URL``), does not parse, holds a NUL
    or names an impossible port is ``ledger.database.url_invalid``; the message never
    repeats the URL (it may hold a password).
    """
    if url is None:
        url = os.environ.get(URL_ENV) or DEFAULT_URL
    if isinstance(url, str):
        if len(url) > MAX_URL_LENGTH or "\x00" in url:
            raise LedgerError(
                DATABASE_URL_INVALID,
                "the database URL is not usable: "
                + (
                    f"longer than {MAX_URL_LENGTH} characters"
                    if len(url) > MAX_URL_LENGTH
                    else "it holds a NUL character"
                ),
            )
        try:
            parsed = sa.make_url(url)
        except (sa.exc.ArgumentError, ValueError, TypeError) as error:
            raise LedgerError(
                DATABASE_URL_INVALID,
                f"the database URL is not usable: {_url_problem(error)}; {SUPPORTED}",
            ) from None
    elif isinstance(url, sa.URL):
        parsed = url
    else:
        raise LedgerError(
            DATABASE_URL_INVALID,
            f"the database URL must be a string, not {type(url).__name__}",
        )
    try:
        port = parsed.port
    except ValueError:  # a port sa.URL was built with, not parsed
        port = -1
    if port is not None and not (isinstance(port, int) and 0 < port < 65536):
        raise LedgerError(DATABASE_URL_INVALID, "the database URL's port is not from 1 to 65535")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _url_problem(error: BaseException) -> str:
    """What is wrong with a URL, without the URL (SQLAlchemy's message quotes it)."""
    if isinstance(error, sa.exc.ArgumentError):
        return "it does not parse as dialect+driver://user:password@host:port/database"
    return "a part of it is malformed (the port must be a number)"


def check_driver(url: sa.URL, drivers: Collection[str], what: str) -> None:
    """Refuse (``ledger.database.unsupported``) a backend or driver not in ``drivers``."""
    if url.drivername in drivers:
        return
    try:
        url.get_dialect()
    except Exception:  # NoSuchModuleError: no dialect of that name at all
        raise LedgerError(
            DATABASE_URL_INVALID,
            f"the database URL names no known database ({url.drivername[:40]!r}): {SUPPORTED}",
        ) from None
    raise LedgerError(
        DATABASE_UNSUPPORTED, f"{url.drivername[:40]!r} is not supported by {what}: {SUPPORTED}"
    )


def resolve_url(url: str | sa.URL | None = None) -> str:
    """The URL to use: the argument, else ``BENCHLEDGER_DATABASE_URL``, else the default
    (refused with ``ledger.database.url_invalid`` as :func:`parse_url` says)."""
    return parse_url(url).render_as_string(hide_password=False)


def split_pooler(url: sa.URL) -> tuple[sa.URL, bool]:
    """The URL to connect with (without :data:`POOLER_OPTION`) and whether it says
    transaction pooling (``?benchledger_pooler=transaction``).

    Any other value, the option given twice, or given on a URL that is not
    PostgreSQL's, is ``ledger.database.url_invalid`` (the message never repeats the URL).
    """
    if POOLER_OPTION not in url.query:
        return url, False
    value = url.query[POOLER_OPTION]
    if value != TRANSACTION_POOLING:
        shown = value if isinstance(value, str) else ", ".join(value)
        raise LedgerError(
            DATABASE_URL_INVALID,
            f"the database URL's {POOLER_OPTION}={shown[:40]!r} is not known: "
            f"{POOLER_OPTION}={TRANSACTION_POOLING} says a transaction-pooling PgBouncer "
            "sits in front of PostgreSQL (a session-pooling one needs no option)",
        )
    if url.get_backend_name() != "postgresql":
        raise LedgerError(
            DATABASE_URL_INVALID,
            f"the database URL's {POOLER_OPTION} is for PostgreSQL URLs only, "
            f"not {url.drivername[:40]!r}",
        )
    return url.difference_update_query([POOLER_OPTION]), True


def check_pool_size(pool_size: object) -> None:
    """``None`` or an int from 1 to :data:`MAX_POOL_SIZE` (else
    ``ledger.database.options_invalid``)."""
    if pool_size is None:
        return
    if isinstance(pool_size, bool) or not isinstance(pool_size, int):
        raise LedgerError(DATABASE_OPTIONS_INVALID, "pool_size must be an integer (or None)")
    if not 1 <= pool_size <= MAX_POOL_SIZE:
        raise LedgerError(DATABASE_OPTIONS_INVALID, f"pool_size must be from 1 to {MAX_POOL_SIZE}")


def check_echo(echo: object) -> None:
    if not isinstance(echo, bool) and echo != "debug":
        raise LedgerError(DATABASE_OPTIONS_INVALID, "echo must be True, False or 'debug'")


def create_engine_checked(create: Any, url: sa.URL, options: dict[str, Any]) -> Any:
    """``create(url, **options)`` (``sa.create_engine`` or its async twin), with SQLAlchemy's
    and the driver's refusals coded: an unknown dialect ``ledger.database.unsupported``, a
    missing driver ``ledger.database.driver_missing``, bad URL arguments ``url_invalid``."""
    try:
        return create(url, **options)
    except sa.exc.NoSuchModuleError:
        raise LedgerError(
            DATABASE_URL_INVALID,
            f"the database URL names no known database ({url.drivername[:40]!r}): {SUPPORTED}",
        ) from None
    except ImportError as error:
        raise LedgerError(
            DATABASE_DRIVER_MISSING,
            f"the database driver is not installed ({error.name or error}): {SUPPORTED}",
        ) from None
    except (sa.exc.ArgumentError, ValueError, TypeError) as error:
        raise LedgerError(
            DATABASE_URL_INVALID,
            f"the database URL is not usable: {type(error).__name__} from its arguments; "
            f"{SUPPORTED}",
        ) from None


def engine_options(
    url: sa.URL,
    *,
    echo: bool = False,
    pool_size: int | None = None,
    transaction_pooling: bool = False,
) -> dict[str, Any]:
    """The keyword arguments benchledger creates its engines with (sync and asyncio alike).

    SQLite: the busy timeout. PostgreSQL: ``pool_pre_ping``; with
    ``transaction_pooling`` (a PgBouncer in transaction mode, :func:`split_pooler`)
    psycopg's ``prepare_threshold=None``: no statement is ever prepared on the
    server. ``pool_size`` (optional) sizes the connection pool: that many kept, as
    many more on demand (a worker with K cases in flight wants about 2 x K).
    """
    options: dict[str, Any] = {"echo": echo}
    if url.get_backend_name() == "sqlite":
        options["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
    else:
        options["pool_pre_ping"] = True
        if transaction_pooling:
            options["connect_args"] = {"prepare_threshold": None}
    check_echo(echo)
    check_pool_size(pool_size)
    if pool_size is not None:
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


def ping_idle_connections(engine: sa.Engine) -> None:
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


#: psycopg's own InternalError (no SQLSTATE) for a command (BEGIN, COMMIT, a savepoint)
#: that got more than one result: what a client of PgBouncer gets when its server
#: connection is cut mid-command (the server's error, then PgBouncer's own).
_LOST_COMMAND = re.compile(r"received \d+ results from command ")


def detect_lost_commands(engine: sa.Engine) -> None:
    """Count psycopg's "received 2 results from command" (:data:`_LOST_COMMAND`) as a
    disconnect, so the pool lets the connection go and :func:`benchledger.faults.is_transient`
    says "try again", as for any server connection lost.

    SQLAlchemy does so by itself on an established connection (psycopg marks it broken),
    but not for a connection still being set up (the dialect's first queries run in a
    transaction with a savepoint), where a lost server session otherwise ended a worker
    at start-up with a non-transient ``InternalError``.
    """
    internal_error = engine.dialect.loaded_dbapi.InternalError

    @event.listens_for(engine, "handle_error")
    def _lost_command(context: sa.engine.ExceptionContext) -> None:
        error = context.original_exception
        if (
            isinstance(error, internal_error)
            and getattr(error, "sqlstate", None) is None
            and _LOST_COMMAND.match(str(error))
        ):
            context.is_disconnect = True


def configure_sqlite(engine: sa.Engine) -> None:
    """SQLAlchemy's pysqlite recipe: we emit BEGIN ourselves, IMMEDIATE for writes."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let the "begin" hook own BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
        cursor.close()

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None and record.info.pop(_TEMP_IN_MEMORY, False):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA temp_store = DEFAULT")
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        options = connection.get_execution_options()
        if options.get(KEPT_WRITER_OPTION):
            return  # Database._kept_write begins it, once every "begin" listener has run
        if options.get(WRITE_OPTION):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            connection.exec_driver_sql("BEGIN")


def keep_temp_files_in_memory(connection: sa.Connection) -> None:
    """SQLite: this connection keeps its temporary files (statement journals, sorts) in
    memory until it goes back to the pool, where it gets the default again.

    For the hot path's writer only. A statement that changes several rows and may
    fail on a constraint (a batched claim, a group commit) journals each page it
    changes first, so that a failure undoes only it; past 64 KiB that journal is
    a temporary file, written and truncated at every such statement: a claim of
    16 items took 0.86 ms instead of 0.27. Its statements change tens of pages;
    a campaign's deletion or a migration changes every page of a table, and
    keeps the default (files).
    """
    pooled = connection.connection
    cursor = pooled.cursor()  # on the driver: a statement here would begin a transaction
    try:
        cursor.execute("PRAGMA temp_store = MEMORY")
    finally:
        cursor.close()
    pooled.info[_TEMP_IN_MEMORY] = True


def begin_immediate(connection: sa.Connection) -> None:
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


def enable_sqlite_wal(engine: sa.Engine) -> None:
    """Put a SQLite file in WAL mode (persistent in the file).

    Switching journal mode needs the file to itself and SQLite does not
    always wait for it on the busy timeout, so retry while other processes
    (often upgrading at the same moment) still hold it.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_SECONDS
    raw = engine.raw_connection()
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
