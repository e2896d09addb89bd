"""PostgreSQL connections are pinged when they were idle, not on every transaction.

A hot loop of short transactions (claim, complete) checks a connection out and in
again within milliseconds: pinging it each time would double the round trips. A
connection that sat idle (the server may have restarted meanwhile) is pinged and,
if dead, replaced before anyone uses it.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.db import engine as db_engine
from benchledger.faults import is_transient


@pytest.fixture
def pg(ledger_db: Database) -> Database:
    if ledger_db.dialect_name != "postgresql":
        pytest.skip("PostgreSQL's connection pool")
    return ledger_db


def _backend_pid(db: Database) -> int:
    with db.write_connection() as connection:
        return int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def _terminate(db: Database, pid: int) -> None:
    outside = sa.create_engine(db.engine.url, poolclass=sa.pool.NullPool)
    try:
        with outside.connect() as connection:
            connection.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    finally:
        outside.dispose()


def test_a_connection_used_a_moment_ago_is_not_pinged(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinged = []
    original = pg.engine.dialect.do_ping
    monkeypatch.setattr(pg.engine.dialect, "do_ping", lambda c: pinged.append(1) or original(c))
    first = _backend_pid(pg)
    for _ in range(20):
        assert _backend_pid(pg) == first  # the same pooled connection, reused
    assert pinged == []


def test_an_idle_connection_that_died_is_replaced_before_use(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_engine, "POSTGRES_PING_IDLE_SECONDS", 0.0)  # every checkout is idle
    first = _backend_pid(pg)
    _terminate(pg, first)
    # The checkout's ping finds it dead; the pool connects anew; the caller sees nothing.
    second = _backend_pid(pg)
    assert second != first


def test_a_connection_that_died_while_hot_fails_as_a_transient_fault(pg: Database) -> None:
    first = _backend_pid(pg)
    _terminate(pg, first)  # within the idle window: trusted, not pinged
    with pytest.raises(sa.exc.OperationalError) as caught, pg.write_connection() as connection:
        connection.exec_driver_sql("SELECT 1")
    assert is_transient(caught.value)  # what workers retry (benchledger.faults)
    assert _backend_pid(pg) != first  # and the pool has let the dead connection go
