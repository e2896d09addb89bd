"""The project's own suite runs every ledger test on SQLite and on PostgreSQL.

The ``benchledger.testing`` plugin provides the database fixtures. Under
``CI=true`` a missing PostgreSQL server is an error, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from benchledger.db import Database
from benchledger.testing.plugin import BACKENDS_ENV, ledger_server_url

#: ``with statements(db) as seen:`` (the ``statements`` fixture).
StatementLog = Callable[[Database], AbstractContextManager[list[tuple[str, Any]]]]


def pytest_configure(config: pytest.Config) -> None:
    if ledger_server_url(config):
        os.environ.setdefault(BACKENDS_ENV, "sqlite,postgresql")
    elif os.environ.get("CI") == "true":
        raise pytest.UsageError(
            "CI=true but no PostgreSQL server was given (BENCHLEDGER_TEST_URL): "
            "run the suite through `make test`, which starts one"
        )


@contextmanager
def _statements(db: Database) -> Iterator[list[tuple[str, Any]]]:
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


@pytest.fixture
def statements() -> StatementLog:
    """``with statements(db) as seen:`` every SQL statement ``db`` sends in the block
    (with its parameters), in order: what the cost tests count and explain."""
    return _statements
