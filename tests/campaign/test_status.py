"""status(): when the next claim may find work (``next_due_at``), on both backends."""

from __future__ import annotations

import json

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

from .conftest import T0, complete_all, execute, make_plan, result_for


def test_a_fresh_campaign_is_due_at_once(service: CampaignService, cid: str) -> None:
    status = service.status(cid)
    assert status.next_due_at == T0
    payload = status.as_payload()
    assert payload["next_due_at"] == T0
    assert json.loads(json.dumps(payload)) == payload


def test_next_due_at_is_the_earliest_retry_or_lease_expiry(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claims = []
    for lease in (200, 100, 300, 400, 500, 600):
        claim = service.claim(cid, "w-1", lease_seconds=lease)
        assert claim is not None
        claims.append(claim)
    # Everything is leased: the first lease to expire is when an item may come back.
    assert service.status(cid).next_due_at == T0 + 100
    service.fail(claims[0], "provider.down", delay_seconds=30)
    assert service.status(cid).next_due_at == T0 + 30  # a retry, sooner than any expiry
    service.fail(claims[2], "provider.down", delay_seconds=10)
    assert service.status(cid).next_due_at == T0 + 10
    # A lease that has expired (not swept yet) makes the item due now: a time in the past.
    clock.advance(150)
    assert service.status(cid).next_due_at == T0 + 10
    retried = [service.claim(cid, "w-1", lease_seconds=1000) for _ in range(3)]
    assert all(claim is not None for claim in retried)  # two retries, one swept expired lease
    assert service.status(cid).next_due_at == T0 + 400


def test_next_due_at_follows_the_report_once_every_item_succeeded(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    complete_all(service, cid)
    assert service.status(cid).next_due_at == T0  # the report is pending since create
    report = service.claim_report(cid, "r-1", lease_seconds=60)
    assert report is not None
    assert service.status(cid).next_due_at == T0 + 60
    service.fail_report(report, "store.down", delay_seconds=45)
    assert service.status(cid).next_due_at == T0 + 45
    clock.advance(45)
    report = service.claim_report(cid, "r-1")
    assert report is not None
    service.summarize(cid)
    service.complete_report(report)
    status = service.status(cid)
    assert status.report_finalization["status"] == "succeeded"
    assert status.next_due_at is None  # finished: nothing will ever be due


def test_next_due_at_is_none_when_blocked_for_good(
    service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite, max_attempts=1)
    first = service.claim(cid, "w-1")
    assert first is not None
    service.fail(first, "provider.down", retryable=False)
    status = service.status(cid)
    assert status.blocked and status.next_due_at == T0  # the other item still gets its attempt
    second = service.claim(cid, "w-1", lease_seconds=50)
    assert second is not None
    assert service.status(cid).next_due_at == T0 + 50
    service.complete(second, result_for(second))
    status = service.status(cid)
    assert (status.counts["failed"], status.counts["succeeded"]) == (1, 1)
    assert status.next_due_at is None  # every item is final and one failed: no report


def test_next_due_at_is_none_after_the_report_failed_for_good(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    report = service.claim_report(cid, "r-1")
    assert report is not None
    service.fail_report(report, "benchmark.campaign.report_invalid", retryable=False)
    status = service.status(cid)
    assert status.blocked and status.next_due_at is None
    # An item's stored next_attempt_at does not matter once it succeeded.
    execute(ledger_db, "UPDATE benchmark_campaign_work SET next_attempt_at = 0")
    assert service.status(cid).next_due_at is None
