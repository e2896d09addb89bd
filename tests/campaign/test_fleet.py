"""FleetWorker: one worker for every open campaign, fairly, with an allow-listed evaluator.

In-process here (threads on the real database); the fleet's processes, kills
and the limit-group run against the model server are in tests/cli/test_fleet_cli.py.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from benchledger.domain import campaign as dom
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.fleet import FleetWorker

from .helpers import make_plan, result_for

Heartbeat = Callable[[], None]


def ok(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
    return result_for(claim)


def create(service: CampaignService, model: str, evaluator: str | None, cases: int = 3) -> str:
    plan = make_plan(cases=cases, candidate_model_id=model)
    return service.create(plan.policy, plan.suite, evaluator=evaluator)


def test_a_fleet_finishes_every_campaign_it_has_an_evaluator_for(
    service: CampaignService, clock: LedgerClock
) -> None:
    served = [create(service, f"model-{i}", "evals:ok") for i in range(3)]
    foreign = create(service, "model-x", "evals:other")
    unnamed = create(service, "model-y", None)
    fleet = FleetWorker(
        service,
        "fleet-1",
        {"evals:ok": ok},
        concurrency=3,
        poll_seconds=0.05,
        clock=clock,
        sleep=clock.advance,
    )
    summary = fleet.run()
    assert summary.failed == 0 and summary.succeeded == 3 * 6
    for cid in served:
        status = service.status(cid)
        assert status.complete and status.report_finalization["status"] == "succeeded"
    for cid in (foreign, unnamed):  # never touched: no evaluator of this fleet's
        assert service.status(cid).counts["pending"] == 6


def test_campaigns_take_turns(service: CampaignService, clock: LedgerClock) -> None:
    campaign_ids = [create(service, f"model-{i}", "evals:ok", cases=10) for i in range(3)]

    def ok_recorded(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        order_of_campaigns.append(claim.campaign_id)
        return result_for(claim)

    order_of_campaigns: list[str] = []
    FleetWorker(
        service, "fleet-1", {"evals:ok": ok_recorded}, clock=clock, sleep=clock.advance
    ).run()
    # One lane, round robin: the first 30 cases go 10 to each, and no campaign waits
    # for another to finish.
    first = Counter(order_of_campaigns[:30])
    assert set(first) == set(campaign_ids) and set(first.values()) == {10}
    window = Counter(order_of_campaigns[:6])
    assert set(window.values()) == {2}


def test_new_campaigns_are_picked_up_without_a_restart(
    service: CampaignService, clock: LedgerClock
) -> None:
    create(service, "model-0", "evals:ok", cases=20)
    later: list[str] = []
    created = threading.Event()

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        if not created.is_set():
            created.set()
            later.append(create(service, "model-late", "evals:ok"))
        return result_for(claim)

    FleetWorker(
        service,
        "fleet-1",
        {"evals:ok": evaluate},
        refresh_seconds=0.01,
        clock=clock,
        sleep=clock.advance,
    ).run()
    status = service.status(later[0])
    assert status.complete and status.report_finalization["status"] == "succeeded"


def test_cancelled_and_finished_campaigns_are_skipped(
    service: CampaignService, clock: LedgerClock
) -> None:
    done = create(service, "model-0", "evals:ok")
    FleetWorker(service, "fleet-1", {"evals:ok": ok}, clock=clock, sleep=clock.advance).run()
    cancelled = create(service, "model-1", "evals:ok")
    service.cancel(cancelled)
    seen: list[str] = []

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        seen.append(claim.campaign_id)
        return result_for(claim)

    summary = FleetWorker(
        service, "fleet-1", {"evals:ok": evaluate}, clock=clock, sleep=clock.advance
    ).run()
    assert summary.cases == 0 and seen == []
    assert [c.campaign_id for c in service.open_campaigns()] == []
    assert service.status(done).report_finalization["status"] == "succeeded"


def test_providers_and_ids_narrow_the_fleet(service: CampaignService, clock: LedgerClock) -> None:
    a = create(service, "model-0", "evals:ok")
    plan = make_plan(cases=3, candidate_provider_id="other-provider")
    b = service.create(plan.policy, plan.suite, evaluator="evals:ok")
    listed = service.open_campaigns(providers=["other-provider"])
    assert [c.campaign_id for c in listed] == [b]
    assert [c.campaign_id for c in service.open_campaigns(campaign_ids=[a])] == [a]
    FleetWorker(
        service,
        "fleet-1",
        {"evals:ok": ok},
        providers=["other-provider"],
        clock=clock,
        sleep=clock.advance,
    ).run()
    assert service.status(b).complete and not service.status(a).complete


@pytest.mark.parametrize("evaluators", [{}, {"x": 3}, {1: ok}, [("x", ok)]])
def test_a_fleet_refuses_bad_evaluators(service: CampaignService, evaluators: Any) -> None:
    with pytest.raises(CampaignBlocked) as refused:
        FleetWorker(service, "fleet-1", evaluators)
    assert refused.value.code == dom.DEPENDENCY_INVALID
