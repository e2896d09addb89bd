"""health: its reasons and classification; reads never take the write lock."""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.integrity import REASON_INTEGRITY_FAILED
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

if TYPE_CHECKING:
    from helpers import StatementLog

from .helpers import T0, complete_all, execute, make_plan, result_for


def reasons(service: CampaignService, cid: str, **kwargs: object) -> tuple[str, str]:
    health = service.health(cid, **kwargs)  # type: ignore[arg-type]
    return health.status, ",".join(health.reasons)


def test_fresh_campaign_is_healthy(service: CampaignService, cid: str) -> None:
    health = service.health(cid)
    assert health.as_payload() == {
        "schema": dom.HEALTH_SCHEMA,
        "campaign_id": cid,
        "status": "healthy",
        "reasons": [],
        "counts": {"failed": 0, "leased": 0, "pending": 6, "retry_wait": 0, "succeeded": 0},
        "work_count": 6,
        "report_ready": False,
        "last_progress_at": T0,
    }


def test_stalled_when_due_work_sits_idle(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    clock.advance(3600)
    assert reasons(service, cid) == ("healthy", "")
    clock.advance(1)
    assert reasons(service, cid) == ("degraded", dom.REASON_STALLED)
    assert reasons(service, cid, stale_after_seconds=7200) == ("healthy", "")
    claim = service.claim(cid, "w-1", lease_seconds=600)
    assert claim is not None
    assert reasons(service, cid) == ("healthy", "")  # a live lease is progress


def test_errors_and_failures(service: CampaignService, cid: str) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "provider.timeout", delay_seconds=60)
    assert reasons(service, cid) == ("degraded", "benchmark.campaign.error.provider.timeout")
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "judge.refused", retryable=False)
    status, why = reasons(service, cid)
    assert status == "blocked"
    assert why.split(",") == [
        "benchmark.campaign.error.judge.refused",
        "benchmark.campaign.error.provider.timeout",
        dom.REASON_FAILED,
    ]


def test_validity_expired_blocks(service: CampaignService, clock: LedgerClock) -> None:
    plan = make_plan(valid_until=T0 + 10)
    cid = service.create(plan.policy, plan.suite)
    clock.advance(11)
    assert reasons(service, cid) == ("blocked", dom.VALIDITY_EXPIRED)


def test_small_clock_skew_is_tolerated_large_is_a_reason(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.complete(claim, result_for(claim), now=T0 + 100)  # a worker whose clock runs ahead
    assert reasons(service, cid, now=T0 + 97) == ("healthy", "")
    assert reasons(service, cid, now=T0 + 30) == ("degraded", dom.REASON_CLOCK_SKEW)
    assert service.health(cid, now=T0 + 30).last_progress_at == T0 + 100


def test_health_refuses_bad_arguments(service: CampaignService, cid: str) -> None:
    for threshold in (0, -1, dom.MAX_STALE_SECONDS + 1, math.nan):
        with pytest.raises(CampaignBlocked) as caught:
            service.health(cid, stale_after_seconds=threshold)
        assert caught.value.code in (dom.STALE_THRESHOLD_INVALID, dom.TIME_INVALID)
    with pytest.raises(CampaignBlocked) as caught:
        service.health(cid, now=-5)
    assert caught.value.code == dom.TIME_INVALID


def test_health_of_nonsense_ids(service: CampaignService) -> None:
    health = service.health("'; DROP TABLE x")
    assert (health.campaign_id, health.status, health.reasons) == (
        "invalid",
        "blocked",
        (dom.NOT_FOUND,),
    )


# Corruptions the aggregates themselves show (every other kind: test_tamper.py, on verify()).
CORRUPTIONS = {
    "extra_item": "INSERT INTO benchmark_campaign_work (work_id, campaign_id, target_locale,"
    " suite_case_key, status, attempts, max_attempts, next_attempt_at, created_at, updated_at)"
    " SELECT 'x', campaign_id, 'de-DE', 'case-0099', 'pending', 0, 3, 0, 0, 0"
    " FROM benchmark_campaigns",
    "policy_edited": "UPDATE benchmark_campaign_policies SET policy_json = replace(policy_json,"
    " 'test-model', 'other-model')",
    "suite_edited": "UPDATE benchmark_campaign_suites SET case_count = 4",
    "report_state_leased_without_token": "UPDATE benchmark_campaign_report_state"
    " SET status = 'leased', attempts = 1, lease_owner = 'r'",
    "report_state_budget": "UPDATE benchmark_campaign_report_state SET max_attempts = 5",
    "campaign_count_edited": "UPDATE benchmark_campaigns SET work_count = 7",
    "campaign_created_after_updated": "UPDATE benchmark_campaigns SET created_at = updated_at + 1",
    "error_code_not_a_code": "UPDATE benchmark_campaign_work SET status = 'retry_wait',"
    " attempts = 1, last_error_code = 'NOT A CODE'",
}


@pytest.mark.parametrize("statement", list(CORRUPTIONS.values()), ids=list(CORRUPTIONS))
def test_corrupt_state_is_blocked_never_raised(
    ledger_db: Database, clock: LedgerClock, cid: str, statement: str
) -> None:
    execute(ledger_db, statement)
    health = CampaignService(ledger_db, clock=clock).health(cid)  # a fresh reader
    assert (health.status, health.reasons, health.report_ready) == (
        "blocked",
        (dom.STATE_INVALID,),
        False,
    )
    assert health.as_payload()["schema"] == dom.HEALTH_SCHEMA


def test_a_campaign_row_in_the_future_is_clock_skew(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    execute(ledger_db, "UPDATE benchmark_campaigns SET updated_at = updated_at + 60")
    assert reasons(service, cid) == ("degraded", dom.REASON_CLOCK_SKEW)


def test_health_says_when_results_were_last_verified(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    assert (service.health(cid).verified_at, service.health(cid).verified_ok) == (None, None)
    assert "verified_at" not in service.health(cid).as_payload()  # the v1 payload until then
    complete_all(service, cid)
    service.summarize(cid)
    clock.advance(10)
    assert service.verify(cid).ok
    clock.advance(10)
    health = service.health(cid)
    assert (health.status, health.report_ready) == ("healthy", True)
    assert (health.verified_at, health.verified_ok) == (T0 + 10, True)
    assert health.as_payload()["verified_at"] == T0 + 10
    # An edit the aggregates cannot see: healthy until an audit finds it, blocked since.
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = 2")
    assert service.health(cid).status == "healthy"
    assert not service.verify(cid).ok
    health = service.health(cid)
    assert (health.status, health.report_ready, health.verified_ok) == ("blocked", False, False)
    assert health.reasons == (REASON_INTEGRITY_FAILED,)
    status = service.status(cid)
    assert (status.blocked, status.verified_ok) == (False, False)  # blocked: an operator must act


def test_health_with_verify_runs_the_audit_too(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    service.summarize(cid)
    seen: list[tuple[int, int]] = []
    health = service.health(
        cid, verify=True, progress=lambda done, total: seen.append((done, total))
    )
    assert health.integrity is not None and health.integrity.ok
    assert (health.status, health.report_ready, health.verified_ok) == ("healthy", True, True)
    assert health.as_payload()["integrity"]["ok"] is True
    assert seen == [(6, 6)]
    execute(ledger_db, "UPDATE benchmark_campaign_work SET result_seal = NULL")
    health = service.health(cid, verify=True)
    assert health.integrity is not None and not health.integrity.ok
    assert (health.status, health.report_ready) == ("blocked", False)
    assert health.reasons == (REASON_INTEGRITY_FAILED, dom.STATE_INVALID)
    with pytest.raises(CampaignBlocked) as caught:
        service.health(cid, verify=1)  # type: ignore[arg-type]
    assert caught.value.code == dom.DEPENDENCY_INVALID


def test_health_reads_only_aggregates(
    ledger_db: Database, service: CampaignService, cid: str, statements: StatementLog
) -> None:
    """No statement of health() returns the items' rows or their results."""
    complete_all(service, cid)
    service.summarize(cid)
    with statements(ledger_db) as seen:
        service.health(cid)
        service.status(cid)
    work = [statement for statement, _ in seen if "benchmark_campaign_work" in statement]
    assert work and all("result_json" not in statement for statement in work)
    assert all("count(" in s.lower() or "LIMIT" in s.upper() for s in work)


@contextmanager
def writer_holding_locks(db: Database) -> Iterator[None]:
    """Another process in the middle of writing: it holds the write locks readers could want.

    SQLite: the database's write lock (``BEGIN IMMEDIATE``). PostgreSQL: EXCLUSIVE
    locks on the campaign tables, which block every writer but no reader.
    """
    if db.sqlite_path is not None:
        writer = sqlite3.connect(db.sqlite_path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        return
    with db.engine.connect() as connection, connection.begin() as transaction:
        connection.execute(
            sa.text(
                "LOCK TABLE benchmark_campaigns, benchmark_campaign_work,"
                " benchmark_campaign_reports, benchmark_campaign_report_state"
                " IN EXCLUSIVE MODE"
            )
        )
        yield
        transaction.rollback()


def test_reads_do_not_take_the_write_lock(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    report = service.summarize(cid)
    outcome: dict[str, object] = {}

    def read() -> None:
        outcome["status"] = service.status(cid).complete
        outcome["health"] = service.health(cid).status
        outcome["report"] = service.load_report(cid) == report
        outcome["summary"] = service.summarize(cid) == report  # verified, nothing to write

    with writer_holding_locks(ledger_db):
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=20)  # a lock wait would not end before the writer does
        assert not reader.is_alive()
    assert outcome == {"status": True, "health": "healthy", "report": True, "summary": True}
