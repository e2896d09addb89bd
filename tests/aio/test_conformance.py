"""One suite of scenarios, run against CampaignService and AsyncCampaignService.

Both flavors run on both backends; the async one on aiosqlite / psycopg's
async mode. Same arguments, same return values, same error codes, and a
refusal leaves every campaign table as it was.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from benchledger.aio import AsyncCampaignService, AsyncDatabase
from benchledger.aio.campaigns import METHODS
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
)
from benchledger.errors import LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from campaign.helpers import make_plan, result_for, snapshot
from helpers import refused


def test_the_async_service_has_every_public_method_with_the_same_signature() -> None:
    public = {
        name
        for name, value in vars(CampaignService).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }
    assert set(METHODS) <= public
    for name in public:
        assert inspect.iscoroutinefunction(getattr(AsyncCampaignService, name)), name
        assert inspect.signature(getattr(AsyncCampaignService, name)) == inspect.signature(
            getattr(CampaignService, name)
        ), name


def test_the_async_service_runs_on_the_async_driver(
    ledger_db: Database, async_db: AsyncDatabase, loop_runner: asyncio.Runner
) -> None:
    def driver_connection_type() -> type:
        raw = async_db.sync.engine.raw_connection()
        try:
            return type(raw.driver_connection)
        finally:
            raw.close()

    kind = loop_runner.run(async_db.run_sync(driver_connection_type))
    if ledger_db.dialect_name == "sqlite":
        import aiosqlite

        assert issubclass(kind, aiosqlite.Connection), kind  # benchledger's one-hop flavour
    else:
        import psycopg

        assert issubclass(kind, psycopg.AsyncConnection), kind


def test_a_case_from_claim_to_report(ledger: Any, ledger_clock: LedgerClock) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = ledger.create(plan.policy, plan.suite, max_attempts=2)
    assert ledger.create(plan.policy, plan.suite, max_attempts=2) == cid  # idempotent
    assert ledger.policy(cid) == plan.policy and ledger.suite(cid) == plan.suite

    claim = ledger.claim(cid, "w-1", lease_seconds=60)
    assert isinstance(claim, ClaimedCase)
    assert (claim.target_locale, claim.suite_case_key, claim.attempt) == ("de-DE", "case-0000", 1)
    assert claim.lease_expires_at == ledger_clock() + 60
    ledger_clock.advance(10)
    renewed = ledger.renew(claim, lease_seconds=60)
    assert renewed.lease_expires_at == ledger_clock() + 60
    outcome = ledger.complete(renewed, result_for(renewed))
    assert isinstance(outcome, CaseOutcome) and outcome.status == "succeeded"

    second = ledger.claim(cid, "w-1")
    failed = ledger.fail(second, "test.flaky", retryable=True, delay_seconds=30)
    assert (failed.status, failed.error_code) == ("retry_wait", "test.flaky")
    assert ledger.claim(cid, "w-1") is None  # not due yet
    ledger_clock.advance(31)
    third = ledger.claim(cid, "w-2")
    assert (third.work_id, third.attempt) == (second.work_id, 2)
    ledger.complete(third, result_for(third))

    status = ledger.status(cid)
    assert status.complete and status.counts["succeeded"] == 2
    assert ledger.report_finalization_required(cid)
    report_claim = ledger.claim_report(cid, "w-1")
    assert isinstance(report_claim, ClaimedReport)
    built = ledger.summarize(cid)
    done = ledger.complete_report(report_claim)
    assert isinstance(done, ReportOutcome) and done.status == "succeeded"
    assert ledger.load_report(cid) == built
    assert not ledger.report_finalization_required(cid)
    assert ledger.health(cid).status == "healthy"
    assert [c.campaign_id for c in ledger.list().campaigns] == [cid]


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda s, cid, c: s.claim("benchmark-campaign-" + "0" * 64, "w-1"), dom.NOT_FOUND),
        (lambda s, cid, c: s.claim(cid, "w-1", lease_seconds=-1), dom.DURATION_INVALID),
        (lambda s, cid, c: s.claim(cid, "bad\u200bworker"), dom.IDENTITY_INVALID),
        (lambda s, cid, c: s.complete(c, {"score": 2}), dom.RESULT_INVALID),
        (lambda s, cid, c: s.renew("not a claim"), dom.CLAIM_INVALID),
        (lambda s, cid, c: s.fail(c, "Not A Code"), dom.FAILURE_INVALID),
        (lambda s, cid, c: s.claim_report(cid, "w-1", lease_seconds=0), dom.DURATION_INVALID),
        (lambda s, cid, c: s.load_report(cid), dom.INCOMPLETE),
    ],
    ids=["unknown", "lease", "worker", "result", "claim", "code", "report-lease", "report"],
)
def test_refusals_carry_the_same_code_and_change_nothing(
    ledger: Any, ledger_db: Database, call: Any, code: str
) -> None:
    plan = make_plan(cases=1, locales=("de-DE",))
    cid = ledger.create(plan.policy, plan.suite)
    claim = ledger.claim(cid, "w-1")
    with refused(ledger_db, code):
        call(ledger, cid, claim)


def test_a_lost_lease_is_lease_lost(
    ledger: Any, ledger_db: Database, ledger_clock: LedgerClock
) -> None:
    plan = make_plan(cases=1, locales=("de-DE",))
    cid = ledger.create(plan.policy, plan.suite)
    claim = ledger.claim(cid, "w-1", lease_seconds=10)
    ledger_clock.advance(11)
    again = ledger.claim(cid, "w-2")  # the sweep releases the expired lease
    # The lost lease gave its attempt back: w-2's is attempt 1 again.
    assert (again.work_id, again.attempt) == (claim.work_id, 1)
    before = snapshot(ledger_db)
    for attempt in (
        lambda: ledger.complete(claim, result_for(claim)),
        lambda: ledger.renew(claim),
        lambda: ledger.fail(claim, "test.late"),
    ):
        with pytest.raises(LedgerError) as caught:
            attempt()
        assert caught.value.code == dom.LEASE_LOST
    assert snapshot(ledger_db) == before


def test_the_integrity_audit_agrees(ledger: Any) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = ledger.create(plan.policy, plan.suite)
    while (claim := ledger.claim(cid, "w-1")) is not None:
        ledger.complete(claim, result_for(claim))
    audit = ledger.verify(cid)
    assert getattr(audit, "ok", True)
