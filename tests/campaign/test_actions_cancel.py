"""Cancel and resume a campaign: claims hand out nothing, live leases may finish, status and
health say so, no report is finalized; refusals change nothing."""

from __future__ import annotations

import pytest

from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.errors import LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import complete_all, result_for

C = "benchmark.campaign."


def test_a_cancelled_campaign_hands_out_nothing_until_resumed(
    service: CampaignService, cid: str, plan: CampaignPlan, clock: LedgerClock
) -> None:
    held = service.claim(cid, "w-1")
    assert held is not None
    controls = service.cancel(cid)
    assert controls.cancelled and controls.cancelled_at == clock()
    assert controls.live_leases == 1
    assert service.claim(cid, "w-2") is None
    # The lease handed out before may still finish, and be renewed.
    held = service.renew(held)
    assert service.complete(held, result_for(held)).status == "succeeded"
    assert service.claim(cid, "w-2") is None
    health = service.health(cid)
    assert C + "cancelled" in health.reasons and health.status == "degraded"
    clock.advance(7200)  # nothing moves because an operator said so: not 'stalled'
    assert C + "stalled" not in service.health(cid).reasons
    assert service.controls(cid).cancelled
    status = service.status(cid)
    assert status.cancelled and status.as_payload()["cancelled"] is True

    resumed = service.resume(cid)
    assert not service.status(cid).cancelled
    assert "cancelled" not in service.status(cid).as_payload()
    assert not resumed.cancelled and resumed.cancelled_at is None
    assert C + "cancelled" not in service.health(cid).reasons
    assert complete_all(service, cid) == plan.work_count - 1
    assert service.status(cid).complete


def test_no_report_is_finalized_while_cancelled(service: CampaignService, cid: str) -> None:
    complete_all(service, cid)
    service.cancel(cid)
    assert service.claim_report(cid, "w-1") is None
    service.resume(cid)
    report = service.claim_report(cid, "w-1")
    assert report is not None
    service.summarize(cid)
    service.complete_report(report)
    with refused(service.db, C + "finished"):
        service.cancel(cid)  # a final report: nothing left to stop


def test_cancel_and_resume_refusals_change_nothing(service: CampaignService, cid: str) -> None:
    with refused(service.db, C + "not_cancelled"):
        service.resume(cid)
    service.cancel(cid)
    with refused(service.db, C + "cancelled"):
        service.cancel(cid)
    unknown = "benchmark-campaign-" + "0" * 64
    for action in (service.cancel, service.resume, service.controls):
        with refused(service.db, C + "not_found"):
            action(unknown)


def test_a_cancelled_campaign_can_still_be_retried_and_deleted(
    service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "example.broken", retryable=False)
    service.cancel(cid)
    assert service.retry(cid).work_ids == (claim.work_id,)
    assert service.claim(cid, "w-1") is None  # retried, yet still cancelled
    service.delete(cid)
    with pytest.raises(LedgerError) as caught:
        service.controls(cid)
    assert caught.value.code == C + "not_found"
