"""aiosqlite with one thread hop per statement: what AsyncDatabase connects SQLite with.

aiosqlite runs a connection's sqlite3 calls on a thread of its own; each call
the event loop awaits is a round trip to that thread. SQLAlchemy's adapter
makes four or five per statement (open a cursor, execute, fetch, close; and a
rollback when the pool takes a connection back), and SQLite's single writer
holds its write lock across all of them: measured, a claim-renew-complete
write transaction held it ~1.7 ms where the same statements take ~0.25 ms on
pysqlite, so K cases in flight wrote slower than one plain loop.

:class:`OneHopConnection` is an aiosqlite connection whose cursor executes a
statement and reads its first rows in one round trip (more rows, if any, a
batch per round trip, so large results still stream); a transaction's
``BEGIN`` travels with its first statement, and a rollback skips the round
trip when no transaction is open. A claim, renewal or completion is then a
round trip per statement plus its COMMIT. The sqlite3 calls, their order and
the thread they run on are aiosqlite's own; a BEGIN that meets a locked
database raises from that first statement, inside the same transaction block.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

import aiosqlite

#: Rows read with the statement (and per further round trip): SQLAlchemy fetches
#: all rows of a plain query at once, a streamed query a batch at a time.
BATCH_ROWS = 512


class _Outcome:
    """What one execute round trip brings back from the connection's thread."""

    __slots__ = ("cursor", "description", "lastrowid", "rowcount", "rows")

    def __init__(self, cursor: sqlite3.Cursor, rows: list[Any]) -> None:
        self.description = cursor.description
        self.rowcount = cursor.rowcount
        self.lastrowid = cursor.lastrowid
        self.rows = rows
        # Still open only while rows may remain (a full batch came back).
        self.cursor: sqlite3.Cursor | None = cursor if len(rows) == BATCH_ROWS else None


def _run(
    connection: sqlite3.Connection,
    operation: Callable[[sqlite3.Cursor], Any],
    begin: str | None,
) -> _Outcome:
    """On the connection's thread: ``begin`` (if any), then open a cursor, run
    ``operation`` and read the first rows."""
    if begin is not None:
        connection.execute(begin).close()
    cursor = connection.cursor()
    try:
        operation(cursor)
        rows = cursor.fetchmany(BATCH_ROWS) if cursor.description else []
    except BaseException:
        cursor.close()
        raise
    outcome = _Outcome(cursor, rows)
    if outcome.cursor is None:
        cursor.close()
    return outcome


def _more(cursor: sqlite3.Cursor) -> list[Any]:
    rows = cursor.fetchmany(BATCH_ROWS)
    if len(rows) < BATCH_ROWS:
        cursor.close()
    return rows


class OneHopCursor:
    """The cursor SQLAlchemy's aiosqlite adapter drives, one round trip per statement."""

    def __init__(self, connection: OneHopConnection) -> None:
        self._connection = connection
        self._open: sqlite3.Cursor | None = None
        self._rows: deque[Any] = deque()
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    async def __aenter__(self) -> OneHopCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _run(self, operation: Callable[[sqlite3.Cursor], Any]) -> OneHopCursor:
        await self.close()
        connection = self._connection
        begin, connection.pending_begin = connection.pending_begin, None
        outcome: _Outcome = await connection.on_thread(_run, connection._conn, operation, begin)
        self.description = outcome.description
        self.rowcount = outcome.rowcount
        self.lastrowid = outcome.lastrowid
        self._rows = deque(outcome.rows)
        self._open = outcome.cursor
        return self

    async def execute(self, sql: str, parameters: Any = None) -> OneHopCursor:
        connection = self._connection
        if (
            sql in _BEGINS
            and not parameters
            and connection.pending_begin is None
            and not connection._conn.in_transaction
        ):
            # Sent with the transaction's first statement, in its round trip.
            connection.pending_begin = sql
            await self.close()
            self.description, self.rowcount, self.lastrowid = None, -1, None
            return self
        return await self._run(lambda cursor: cursor.execute(sql, parameters or ()))

    async def executemany(self, sql: str, parameters: Any) -> OneHopCursor:
        return await self._run(lambda cursor: cursor.executemany(sql, parameters))

    async def _fill(self, wanted: int | None) -> None:
        while self._open is not None and (wanted is None or len(self._rows) < wanted):
            cursor = self._open
            rows: list[Any] = await self._connection.on_thread(_more, cursor)
            if len(rows) < BATCH_ROWS:
                self._open = None
            self._rows.extend(rows)

    async def fetchone(self) -> Any:
        await self._fill(1)
        return self._rows.popleft() if self._rows else None

    async def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        wanted = self.arraysize if size is None else size
        await self._fill(wanted)
        return [self._rows.popleft() for _ in range(min(wanted, len(self._rows)))]

    async def fetchall(self) -> Sequence[Any]:
        await self._fill(None)
        rows = list(self._rows)
        self._rows.clear()
        return rows

    async def close(self) -> None:
        self._rows.clear()
        if self._open is not None:
            cursor, self._open = self._open, None
            await self._connection.on_thread(cursor.close)


#: How benchledger's SQLite engines open transactions (see benchledger.db.engine).
_BEGINS: Final = frozenset({"BEGIN", "BEGIN IMMEDIATE"})


class OneHopConnection(aiosqlite.Connection):
    """An aiosqlite connection with :class:`OneHopCursor` cursors.

    It also waits for its thread to stop when it could not connect: aiosqlite
    stops the thread then without waiting, and a thread that answers after
    ``asyncio.run`` has closed the loop dies with "Event loop is closed".
    """

    _stopping: asyncio.Future[Any] | None = None
    #: A BEGIN not sent yet: it goes with the transaction's first statement.
    pending_begin: str | None = None

    def stop(self) -> asyncio.Future[Any] | None:
        self._stopping = super().stop()
        return self._stopping

    async def _connect(self) -> aiosqlite.Connection:
        try:
            return await super()._connect()
        except BaseException:
            if self._stopping is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._stopping)
            raise

    def cursor(self) -> Any:  # aiosqlite's returns an awaitable context manager
        return OneHopCursor(self)

    async def on_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` on the connection's thread, awaited (one round trip)."""
        return await self._execute(function, *args)  # type: ignore[no-untyped-call]

    async def commit(self) -> None:
        if self.pending_begin is not None:  # nothing ran since BEGIN: nothing to commit
            self.pending_begin = None
            return
        await super().commit()

    async def rollback(self) -> None:
        self.pending_begin = None
        # Reading whether a transaction is open does not touch the connection's
        # thread (sqlite3_get_autocommit); nothing else runs on it meanwhile,
        # since every call is awaited before the next is made.
        if self._connection is not None and not self._connection.in_transaction:
            return
        await super().rollback()


def connector(database: str, **kwargs: Any) -> OneHopConnection:
    """The connection for ``sqlite3.connect(database, **kwargs)``, not yet opened (await it)."""
    connection = OneHopConnection(partial(sqlite3.connect, database, **kwargs), 64)
    connection._thread.daemon = True  # as SQLAlchemy does for aiosqlite's own
    return connection
