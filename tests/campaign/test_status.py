"""status(): when the next claim may find work (``next_due_at``); list(): campaigns, paged."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

if TYPE_CHECKING:
    from helpers import StatementLog

from helpers import refused

from .helpers import T0, complete_all, execute, make_plan, result_for


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


# -- list ----------------------------------------------------------------------------------------


def _create(
    service: CampaignService, clock: LedgerClock, models: list[str], at: float
) -> list[str]:
    clock.set(at)
    ids = []
    for model in models:
        plan = make_plan(cases=2, locales=("de-DE",), candidate_model_id=model)
        ids.append(service.create(plan.policy, plan.suite))
    return ids


def test_list_pages_oldest_first_in_a_stable_order(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    assert service.list().as_payload() == {"campaigns": [], "limit": 100, "next_cursor": None}
    later = _create(service, clock, ["m-5", "m-6"], T0 + 10)
    first = _create(service, clock, ["m-1", "m-2", "m-3"], T0)  # created at the same time
    expected = sorted(first) + sorted(later)  # created_at, then campaign id
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = service.list(cursor=cursor, limit=2)
        pages += 1
        seen.extend(summary.campaign_id for summary in page.campaigns)
        assert page.limit == 2 and len(page.campaigns) <= 2
        cursor = page.next_cursor
        if cursor is None:
            break
        assert cursor == page.campaigns[-1].campaign_id
    assert seen == expected and pages == 3
    whole = service.list()
    assert [summary.campaign_id for summary in whole.campaigns] == expected
    assert whole.next_cursor is None
    # A full last page says so only by the next (empty) page: the cursor is exact.
    assert service.list(limit=5).next_cursor is None
    assert service.list(limit=4).next_cursor == expected[3]
    assert service.list(cursor=expected[-1]).campaigns == ()


def test_a_summary_is_the_campaign_row(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite)
    claim = service.claim(cid, "w-1")
    assert claim is not None
    clock.advance(5)
    service.complete(claim, result_for(claim))
    (summary,) = service.list().campaigns
    status = service.status(cid)
    payload = summary.as_payload()
    assert payload == {
        key: status.as_payload()[key]
        for key in (
            "campaign_id",
            "name",
            "candidate",
            "policy_sha256",
            "suite_sha256",
            "work_count",
        )
    } | {"created_at": T0, "updated_at": T0 + 5}
    assert json.loads(json.dumps(payload)) == payload


def test_list_shows_campaigns_without_a_stored_policy(
    ledger_db: Database, service: CampaignService, plan: Any, cid: str
) -> None:
    execute(ledger_db, "DELETE FROM benchmark_campaign_policies")
    execute(ledger_db, "DELETE FROM benchmark_campaign_suites")
    fresh = CampaignService(ledger_db)  # no cached plan
    assert [summary.campaign_id for summary in fresh.list().campaigns] == [cid]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": True},
        {"limit": 2.0},
        {"cursor": "nonsense"},
        {"cursor": "benchmark-campaign-" + "0" * 64},  # names no campaign here
    ],
)
def test_list_refuses_a_bad_page(
    ledger_db: Database, service: CampaignService, cid: str, kwargs: dict[str, Any]
) -> None:
    with refused(ledger_db, dom.PAGE_INVALID):
        service.list(**kwargs)


def test_list_is_a_read(
    ledger_db: Database, service: CampaignService, cid: str, statements: StatementLog
) -> None:
    with statements(ledger_db) as seen:
        service.list()
    assert not any("BEGIN IMMEDIATE" in statement for statement, _ in seen)
    assert not any(
        statement.lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE"))
        for statement, _ in seen
    )
    assert all("benchmark_campaign_work" not in statement for statement, _ in seen)
