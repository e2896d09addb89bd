"""Operators' actions on real databases: retry failed work, delete a campaign.

Each is fenced by the state it applies to and refused with a stable code where it
does not apply, leaving every campaign table unchanged.
"""

from __future__ import annotations

import pytest

from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.errors import LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import CampaignActions
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import complete_all, make_plan, report_state, result_for, snapshot, work_row

C = "benchmark.campaign."


def fail_for_good(service: CampaignService, cid: str, code: str, count: int) -> list[str]:
    """Claim ``count`` items and fail each for good with ``code``; their work ids."""
    failed = []
    for _ in range(count):
        claim = service.claim(cid, "w-1")
        assert claim is not None
        service.fail(claim, code, retryable=False)
        failed.append(claim.work_id)
    return failed


@pytest.fixture
def actions(service: CampaignService) -> CampaignActions:
    return CampaignActions(service)


def test_retry_returns_every_failed_item_to_pending_with_all_its_attempts(
    service: CampaignService, actions: CampaignActions, cid: str, plan: CampaignPlan
) -> None:
    failed = fail_for_good(service, cid, "example.broken", 2)
    status = service.status(cid)
    assert status.counts["failed"] == 2 and status.blocked
    outcome = actions.retry(cid)
    assert outcome.work_ids == tuple(sorted(failed))
    assert outcome.attempts == 3 and not outcome.report_rearmed
    for work_id in failed:
        row = work_row(service.db, work_id)
        assert (row.status, row.attempts, row.last_error_code) == ("pending", 0, None)
    status = service.status(cid)
    assert status.counts["failed"] == 0 and not status.blocked
    assert service.health(cid).status == "healthy"
    assert complete_all(service, cid) == plan.work_count
    assert service.status(cid).complete


def test_retry_with_fewer_attempts_keeps_the_error_and_is_due_now(
    service: CampaignService, actions: CampaignActions, cid: str, clock: LedgerClock
) -> None:
    (work_id,) = fail_for_good(service, cid, "example.broken", 1)
    outcome = actions.retry(cid, attempts=1)
    assert outcome.attempts == 1
    row = work_row(service.db, work_id)
    assert (row.status, row.attempts, row.max_attempts) == ("retry_wait", 2, 3)
    assert row.last_error_code == "example.broken"
    assert row.next_attempt_at == clock()
    assert service.health(cid).status == "degraded"  # waiting to retry, not blocked
    # The one attempt it got is the next claim; failing it again fails it for good.
    claims = []
    while (claim := service.claim(cid, "w-2")) is not None:
        claims.append(claim)
    again = next(claim for claim in claims if claim.work_id == work_id)
    assert again.attempt == 3
    assert service.fail(again, "example.broken", retryable=True).status == "failed"


def test_retry_selects_by_error_code_and_by_work_id(
    service: CampaignService, actions: CampaignActions, cid: str
) -> None:
    timeouts = fail_for_good(service, cid, "example.timeout", 2)
    broken = fail_for_good(service, cid, "example.broken", 2)
    assert actions.retry(cid, codes=["example.timeout"]).work_ids == tuple(sorted(timeouts))
    assert {work_row(service.db, w).status for w in broken} == {"failed"}
    assert actions.retry(cid, work_ids=[broken[0]]).work_ids == (broken[0],)
    assert work_row(service.db, broken[1]).status == "failed"


def test_retry_refusals_change_nothing(
    service: CampaignService, actions: CampaignActions, cid: str, plan: CampaignPlan
) -> None:
    db = service.db
    with refused(db, C + "nothing_to_retry"):
        actions.retry(cid)  # nothing failed yet
    (failed,) = fail_for_good(service, cid, "example.broken", 1)
    pending = next(item.work_id for item in plan.work() if item.work_id != failed)
    with refused(db, C + "nothing_to_retry"):
        actions.retry(cid, codes=["example.other"])
    with refused(db, C + "nothing_to_retry"):
        actions.retry(cid, work_ids=[failed, pending])  # one of them is not failed
    with refused(db, C + "work_not_found"):
        actions.retry(cid, work_ids=["benchmark-work-" + "0" * 64])
    with refused(db, C + "input_invalid"):
        actions.retry(cid, work_ids=["not a work id"])
    with refused(db, C + "input_invalid"):
        actions.retry(cid, codes=["Not A Code"])
    for attempts in (0, 21, True):
        with refused(db, C + "attempts_invalid"):
            actions.retry(cid, attempts=attempts)
    with refused(db, C + "not_found"):
        actions.retry("benchmark-campaign-" + "0" * 64)


def test_a_failed_report_is_re_armed_and_finalizes(
    service: CampaignService, actions: CampaignActions, cid: str
) -> None:
    complete_all(service, cid)
    report = service.claim_report(cid, "w-1")
    assert report is not None
    service.fail_report(report, "example.storage_down", retryable=False)
    assert report_state(service.db, cid).status == "failed"
    assert service.health(cid).status == "blocked"
    with refused(service.db, C + "nothing_to_retry"):
        actions.retry(cid, codes=["example.other"])
    outcome = actions.retry(cid, codes=["example.storage_down"])
    assert outcome.report_rearmed and outcome.work_ids == ()
    state = report_state(service.db, cid)
    assert (state.status, state.attempts, state.last_error_code) == ("pending", 0, None)
    again = service.claim_report(cid, "w-1")
    assert again is not None
    service.summarize(cid)
    service.complete_report(again)
    assert service.health(cid).status == "healthy"
    assert service.load_report(cid)["campaign_id"] == cid


def test_delete_is_refused_while_a_lease_is_live_unless_forced(
    service: CampaignService, actions: CampaignActions, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=60)
    assert claim is not None
    with refused(service.db, C + "leases_live"):
        actions.delete(cid)
    clock.advance(61)  # the lease has expired: nothing live any more
    outcome = actions.delete(cid)
    assert outcome.live_leases == 0
    assert outcome.rows["benchmark_campaigns"] == 1
    assert outcome.rows["benchmark_campaign_work"] == 6
    assert outcome.rows["benchmark_campaign_policies"] == 1
    assert outcome.rows["benchmark_campaign_suites"] == 1
    assert all(rows == [] for rows in snapshot(service.db).values())
    with pytest.raises(LedgerError) as caught:
        service.status(cid)
    assert caught.value.code == C + "not_found"
    with refused(service.db, C + "not_found"):
        actions.delete(cid)


def test_forced_delete_leaves_the_worker_a_lost_lease_and_keeps_a_shared_suite(
    service: CampaignService, actions: CampaignActions, cid: str, plan: CampaignPlan
) -> None:
    other = make_plan(candidate_model_id="other-model")
    assert other.suite.sha256 == plan.suite.sha256
    other_id = service.create(other.policy, other.suite)
    complete_all(service, other_id)
    claim = service.claim(cid, "w-1")
    assert claim is not None
    before = snapshot(service.db)
    outcome = actions.delete(cid, force=True)
    assert outcome.live_leases == 1 and "benchmark_campaign_suites" not in outcome.rows
    with pytest.raises(LedgerError) as caught:
        service.complete(claim, result_for(claim))
    assert caught.value.code in (C + "lease_lost", C + "not_found")
    after = snapshot(service.db)
    assert after["benchmark_campaign_suites"] == before["benchmark_campaign_suites"]
    assert {row[0] for row in after["benchmark_campaigns"]} == {other_id}
    assert service.status(other_id).complete
