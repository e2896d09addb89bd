"""benchledger through a real PgBouncer in transaction pooling mode (``pgbouncer`` backend).

Transaction pooling hands each transaction to whichever server connection is free,
so a client may keep nothing on a server connection between its transactions: no
prepared statement, no session setting, no session lock, no LISTEN. These tests
show the breakage the switch prevents, and hold a whole campaign (threads, asyncio
lanes, the report, the audit) to having nothing of the kind.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker
from benchledger.db import Database, head_revision
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.faults import is_transient
from benchledger.services.campaigns import CampaignService
from benchledger.workers.loop import Worker
from campaign.helpers import make_plan, result_for
from helpers import StatementLog

#: Statements that leave state on the server connection past their transaction.
SESSION_STATE = re.compile(
    r"^\s*(SET\s+(?!LOCAL\b|TRANSACTION\b)|RESET\b|DISCARD\b|PREPARE\b|DEALLOCATE\b"
    r"|LISTEN\b|UNLISTEN\b|CREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\b)"
    r"|\bpg_(try_)?advisory_lock(_shared)?\s*\("
    r"|\bWITH\s+HOLD\b"
    r"|\bset_config\s*\([^)]*,\s*false\s*\)",
    re.IGNORECASE,
)
#: The same query run often enough for psycopg to prepare it (its threshold is 5).
REPEATED = "SELECT count(*) FROM benchmark_campaigns"


@pytest.fixture
def pooled(ledger_db: Database) -> Database:
    assert ledger_db.transaction_pooling, "the pgbouncer backend hands out pooled URLs"
    return ledger_db


def _take_turns(connect: Any) -> None:
    """Two client connections, one after the other, each running ``REPEATED`` in ten
    transactions of its own: one server connection serves them both, in turn."""
    first, second = connect(), connect()
    try:
        for connection in (first, second, first):
            for _ in range(10):
                cursor = connection.cursor()
                cursor.execute(REPEATED)
                cursor.fetchall()
                cursor.close()
                connection.commit()
    finally:
        first.close()
        second.close()


def test_without_the_switch_prepared_statements_break_and_with_it_they_do_not(
    pooled: Database,
) -> None:
    # Without it psycopg prepares the query on its fifth run, under a name (_pg3_0) that
    # the next client prepares again on the same server connection, or that its own
    # next transaction looks for on another one.
    conninfo = pooled.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with pytest.raises(
        (psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName)
    ):
        _take_turns(lambda: psycopg.connect(conninfo))
    # With it (the Database's own connections), nothing is prepared on the server.
    raw = pooled.engine.raw_connection()
    assert raw.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
    raw.close()
    _take_turns(pooled.engine.raw_connection)


def _checked(seen: list[tuple[str, Any]]) -> list[str]:
    assert len(seen) > 100, "the capture saw the campaign's statements"
    return [statement for statement, _ in seen if SESSION_STATE.search(statement)]


def test_a_campaign_through_pgbouncer_keeps_no_session_state(
    pooled: Database, statements: StatementLog
) -> None:
    """Threads claiming, renewing and completing, a failure retried, the report, status,
    health and the audit: every statement they send is transaction-scoped."""
    service = CampaignService(pooled)
    plan = make_plan(cases=20)  # 40 items
    failed_once: set[str] = set()

    def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        heartbeat()  # a renewal
        if claim.work_id not in failed_once and len(failed_once) < 3:
            failed_once.add(claim.work_id)
            raise RuntimeError("flaky")  # failed, retried
        return result_for(claim)

    with statements(pooled) as seen:
        cid = service.create(plan.policy, plan.suite, max_attempts=3)
        summary = Worker(
            service, cid, "w-1", evaluate, concurrency=4, retry_base_seconds=0,
            until_finished=True, poll_seconds=0.05,
        ).run()  # fmt: skip
        status = service.status(cid)
        health = service.health(cid)
        audit = service.verify(cid)
        service.load_report(cid)
    assert summary.report is not None and summary.report.status == "succeeded"
    assert status.counts["succeeded"] == 40 and len(failed_once) == 3
    assert health.status == "healthy", health
    assert audit.ok, audit
    assert _checked(seen) == []


def test_asyncio_lanes_through_pgbouncer(pooled: Database, statements: StatementLog) -> None:
    """AsyncDatabase takes the switch from the same URL: 8 lanes on psycopg's async
    connections, every item once, no statement prepared or session state kept."""
    plan = make_plan(cases=24)  # 48 items
    cid = CampaignService(pooled).create(plan.policy, plan.suite)

    async def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        await asyncio.sleep(0.005)
        await heartbeat()
        return result_for(claim)

    async def main() -> tuple[Any, list[tuple[str, Any]], Any]:
        database = AsyncDatabase(pooled.url, pool_size=8)
        assert database.transaction_pooling and not database.supports_listen
        try:
            with statements(database.sync) as seen:
                worker = AsyncWorker(
                    AsyncCampaignService(database), cid, "w-async", evaluate,
                    concurrency=8, until_finished=True, poll_seconds=0.05,
                )  # fmt: skip
                summary = await worker.run()
            async with database.async_engine.connect() as connection:
                raw = await connection.get_raw_connection()
                threshold = raw.driver_connection.prepare_threshold  # type: ignore[union-attr]
            return summary, seen, threshold
        finally:
            await database.dispose()

    summary, seen, threshold = asyncio.run(main())
    assert threshold is None
    assert summary.report is not None and summary.report.status == "succeeded"
    assert CampaignService(pooled).status(cid).counts["succeeded"] == 48
    assert _checked(seen) == []


def test_the_schema_is_upgraded_through_pgbouncer(ledger_empty_db: Database) -> None:
    """Alembic's one migration transaction, its advisory lock transaction-scoped."""
    assert ledger_empty_db.transaction_pooling
    ledger_empty_db.upgrade()
    assert ledger_empty_db.current_revision() == head_revision()
    ledger_empty_db.require_current_schema()
    with ledger_empty_db.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT count(*) FROM benchmark_campaigns")).scalar() == 0


def _cut_while_connecting(db: Database) -> None:
    """Every new connection of ``db``, while it is being set up (a transaction open, as
    the dialect's first queries are), loses its server session: an administrator
    terminates it, and the connection's next command is a savepoint."""
    admin = sa.create_engine(os.environ["BENCHLEDGER_TEST_PG_URL"], isolation_level="AUTOCOMMIT")

    @event.listens_for(db.engine, "connect")
    def _cut(dbapi_connection: Any, _record: Any) -> None:
        pid = dbapi_connection.execute("SELECT pg_backend_pid()").fetchone()[0]
        with admin.connect() as connection:
            connection.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        time.sleep(0.2)
        with dbapi_connection.transaction():  # SAVEPOINT: PgBouncer's error comes too
            pass

    db.engine.dispose()


def test_a_server_session_lost_while_connecting_through_pgbouncer_is_transient(
    pooled: Database,
) -> None:
    """psycopg reports it as "received 2 results from command" (an InternalError, no
    SQLSTATE): the workers must take it for the lost connection it is and try again,
    not stop at start-up (found by the storm of terminated sessions in test_chaos.py)."""
    if "BENCHLEDGER_TEST_PG_URL" not in os.environ:
        pytest.skip("needs the server's own URL to terminate sessions")
    _cut_while_connecting(pooled)
    with pytest.raises(sa.exc.DBAPIError) as caught, pooled.engine.connect():
        pass
    assert isinstance(caught.value.orig, psycopg.InternalError), caught.value
    assert "received 2 results" in str(caught.value.orig)
    assert caught.value.connection_invalidated
    assert is_transient(caught.value)
