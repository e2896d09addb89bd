"""Helpers every test area shares: captured SQL and its plans, the service layer's
refusal check, and an outside connection holding the write lock.

Imported as ``helpers`` (``tests/`` is on ``sys.path`` through the root
conftest); fixtures stay in ``tests/conftest.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import benchledger.models  # noqa: F401  (every model registered on Base.metadata)
from benchledger.db import Database
from benchledger.errors import LedgerError
from benchledger.models.base import Base

#: ``with statements(db) as seen:`` (the ``statements`` fixture).
StatementLog = Callable[[Database], AbstractContextManager[list[tuple[str, Any]]]]


@contextmanager
def captured_statements(db: Database) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement ``db`` sends in the block, with its parameters, in order."""
    seen: list[tuple[str, Any]] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        seen.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def query_plans(
    db: Database, seen: list[tuple[str, Any]], wanted: Callable[[str], bool]
) -> list[str]:
    """The planner's text for each captured statement ``wanted`` keeps (EXPLAIN only;
    nothing runs): ``EXPLAIN QUERY PLAN`` on SQLite, ``EXPLAIN`` with sequential scans
    off on PostgreSQL (tiny tables: ask which index serves it)."""
    plans = []
    raw = db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        explain = "EXPLAIN QUERY PLAN"
        if db.dialect_name == "postgresql":
            explain = "EXPLAIN"
            cursor.execute("SET enable_seqscan = off")
        for statement, parameters in seen:
            if not wanted(statement):
                continue
            cursor.execute(f"{explain} {statement}", parameters)
            plans.append(
                "\n".join(
                    str(row[-1] if db.dialect_name == "sqlite" else row[0])
                    for row in cursor.fetchall()
                )
            )
        raw.rollback()
    finally:
        raw.close()
    return plans


def every_row(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ledger table, in a stable order: equal before and after means
    nothing changed."""
    with db.engine.connect() as connection:
        return {
            table.name: sorted(
                (tuple(row) for row in connection.execute(sa.select(table))), key=repr
            )
            for table in Base.metadata.sorted_tables
        }


@contextmanager
def refused(db: Database, code: str) -> Iterator[pytest.ExceptionInfo[LedgerError]]:
    """``with refused(db, code) as caught:`` the block raises a ``LedgerError`` with
    ``code`` and leaves every ledger table unchanged; ``caught.value`` is the error.

    The service layer's refusal check (campaigns and studies alike); the command
    line's is ``cli.helpers.refused``.
    """
    before = every_row(db)
    with pytest.raises(LedgerError) as caught:
        yield caught
    assert caught.value.code == code, caught.value
    assert every_row(db) == before


#: PostgreSQL: the lock every campaign write needs (readers still read).
CAMPAIGN_WRITE_LOCK = (
    "LOCK TABLE benchmark_campaign_work, benchmark_campaign_report_state, "
    "benchmark_campaigns IN EXCLUSIVE MODE"
)


class OutsideLock:
    """An outside connection, on a thread of its own, that holds a write lock until
    released: SQLite's database write lock (``BEGIN IMMEDIATE``, WAL readers go on);
    on PostgreSQL, what ``postgres_sql`` takes in its transaction.

    ``start(release_after=...)`` lets go by itself after that many seconds;
    ``released_at`` is the (real) time it let go. As a context manager it starts
    on entry (unless started already) and is released (and joined) on exit.
    """

    def __init__(self, db: Database, postgres_sql: str = CAMPAIGN_WRITE_LOCK) -> None:
        self.db = db
        self.postgres_sql = postgres_sql
        self.released_at = 0.0
        self._release_after: float | None = None
        self._release = threading.Event()
        self._held = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        engine = sa.create_engine(self.db.engine.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as connection:
                if self.db.dialect_name == "sqlite":
                    raw = connection.connection.dbapi_connection
                    assert raw is not None
                    raw.isolation_level = None
                    raw.execute("BEGIN IMMEDIATE")
                else:
                    connection.exec_driver_sql(self.postgres_sql)
                self._held.set()
                self._release.wait(60 if self._release_after is None else self._release_after)
                self.released_at = time.time()
                if self.db.dialect_name == "sqlite":
                    raw.execute("ROLLBACK")
                else:
                    connection.rollback()
        finally:
            engine.dispose()

    def start(self, release_after: float | None = None) -> OutsideLock:
        self._release_after = release_after
        self._thread.start()  # once: a second start raises
        assert self._held.wait(30)
        return self

    def release(self) -> None:
        self._release.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def __enter__(self) -> OutsideLock:
        return self if self._thread.ident is not None else self.start()

    def __exit__(self, *_exc: object) -> None:
        self.release()
