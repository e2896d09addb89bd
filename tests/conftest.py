"""The project's own suite runs every ledger test on SQLite and on PostgreSQL.

The ``benchledger.testing`` plugin provides the database fixtures. Under
``CI=true`` a missing PostgreSQL server is an error, never a skip.
"""

from __future__ import annotations

import os

import pytest

from benchledger.testing.plugin import BACKENDS_ENV, ledger_server_url
from helpers import StatementLog, captured_statements


def pytest_configure(config: pytest.Config) -> None:
    if ledger_server_url(config):
        os.environ.setdefault(BACKENDS_ENV, "sqlite,postgresql")
    elif os.environ.get("CI") == "true":
        raise pytest.UsageError(
            "CI=true but no PostgreSQL server was given (BENCHLEDGER_TEST_URL): "
            "run the suite through `make test`, which starts one"
        )


@pytest.fixture
def statements() -> StatementLog:
    """``with statements(db) as seen:`` every SQL statement ``db`` sends in the block
    (with its parameters), in order: what the cost tests count and explain."""
    return captured_statements
