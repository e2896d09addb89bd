"""Fixtures of the chaos tests: logs, a restartable PostgreSQL server, its databases.

The helpers are in ``helpers.py``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.db import Database

from .helpers import PostgresUnderTest, postgres_bindir


@pytest.fixture
def crew_logs(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def own_postgres(request: pytest.FixtureRequest) -> Iterator[PostgresUnderTest]:
    """A dedicated throwaway server (never the suite's shared one: this one gets restarted)."""
    if "postgresql" not in os.environ.get("BENCHLEDGER_TEST_BACKENDS", "sqlite"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but PostgreSQL is not among this run's backends")
        pytest.skip("PostgreSQL is not among this run's backends")
    bindir = postgres_bindir()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no PostgreSQL server binaries (install postgresql)")
        pytest.skip("no PostgreSQL server binaries")
    server = PostgresUnderTest(bindir)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def restartable_db(own_postgres: PostgresUnderTest) -> Iterator[Database]:
    """A migrated ledger database on the dedicated server."""
    name = f"chaos_{os.getpid()}_{int(time.monotonic() * 1000)}"
    admin = sa.create_engine(own_postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    db = Database(sa.make_url(own_postgres.url).set(database=name))
    db.upgrade()
    try:
        yield db
    finally:
        db.dispose()
