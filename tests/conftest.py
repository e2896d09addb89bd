"""The project's own suite runs every ledger test on SQLite and on PostgreSQL.

The ``benchledger.testing`` plugin provides the database fixtures. Under
``CI=true`` a missing PostgreSQL server, or a backend left out of the run, is an
error, never a skip.
"""

from __future__ import annotations

import os

import pytest

from benchledger.testing.databases import BACKENDS
from benchledger.testing.plugin import BACKENDS_ENV, ledger_backends, ledger_server_url
from helpers import StatementLog, captured_statements


def pytest_configure(config: pytest.Config) -> None:
    if ledger_server_url(config):
        os.environ.setdefault(BACKENDS_ENV, "sqlite,postgresql")
    elif os.environ.get("CI") == "true":
        raise pytest.UsageError(
            "CI=true but no PostgreSQL server was given (BENCHLEDGER_TEST_URL): "
            "run the suite through `make test`, which starts one"
        )
    if os.environ.get("CI") == "true":
        # PostgreSQL-only tests (lost races, the chaos directory) skip where their
        # backend is not chosen: under CI a backend left out is a failure, not a skip.
        missing = sorted(set(BACKENDS) - set(ledger_backends(config)))
        if missing:
            raise pytest.UsageError(
                f"CI=true but the ledger backends leave out {', '.join(missing)} "
                f"({BACKENDS_ENV} or --ledger-backends): under CI every backend runs"
            )


@pytest.fixture
def statements() -> StatementLog:
    """``with statements(db) as seen:`` every SQL statement ``db`` sends in the block
    (with its parameters), in order: what the cost tests count and explain."""
    return captured_statements
