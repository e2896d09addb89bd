"""Limit groups: caps keyed by a name that hold across every campaign in the group.

A campaign joins its provider's group by default (or the one named at create);
the group's live-lease, claims-per-minute and cost-per-minute caps hold in the
claim itself, beside the campaign's own caps (the tighter wins).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_results import ClaimedCase, Outcome
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.drivers import run_next_case

from .helpers import make_plan, result_for, snapshot


def three_campaigns(service: CampaignService, **create: Any) -> list[str]:
    """Three campaigns of one provider (three models), four items each."""
    return [
        service.create(
            make_plan(cases=2, candidate_model_id=f"model-{index}").policy,
            make_plan(cases=2, candidate_model_id=f"model-{index}").suite,
            **create,
        )
        for index in range(3)
    ]


def claims(service: CampaignService, campaign_ids: list[str], n: int) -> list[ClaimedCase]:
    """Up to ``n`` claims, taking turns over the campaigns."""
    taken: list[ClaimedCase] = []
    for turn in range(n):
        claim = service.claim(campaign_ids[turn % len(campaign_ids)], "w-1", lease_seconds=60)
        if claim is not None:
            taken.append(claim)
    return taken


def test_campaigns_join_their_providers_group_by_default(service: CampaignService) -> None:
    first, *_ = three_campaigns(service)
    plan = make_plan(cases=2, candidate_provider_id="other-provider")
    other = service.create(plan.policy, plan.suite, limit_group="team-quota")
    assert service.status(first).limit_group == make_plan().policy.candidate_provider_id
    assert service.status(other).limit_group == "team-quota"


def test_a_groups_live_lease_cap_holds_across_its_campaigns(service: CampaignService) -> None:
    campaign_ids = three_campaigns(service)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_concurrent_leases=4)
    held = claims(service, campaign_ids, 12)
    assert len(held) == 4
    assert {claim.campaign_id for claim in held} == set(campaign_ids)
    assert all(service.claim(cid, "w-2") is None for cid in campaign_ids)
    assert all(service.status(cid).waiting_on_group for cid in campaign_ids)
    service.complete(held[0], result_for(held[0]))
    assert len(claims(service, campaign_ids, 3)) == 1
    usage = service.group_usage(group)
    assert (usage.live_leases, usage.at_cap) == (4, True)
    assert usage.campaigns == tuple(sorted(campaign_ids))


def test_the_tighter_cap_wins(service: CampaignService, plan: Any) -> None:
    campaign_ids = three_campaigns(service)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_concurrent_leases=5)
    service.set_limits(campaign_ids[0], max_concurrent_leases=1)
    held = [claim for claim in claims(service, [campaign_ids[0]], 4)]
    assert len(held) == 1  # the campaign's own cap
    assert len(claims(service, campaign_ids[1:], 10)) == 4  # the group's: 5 in all


def test_a_groups_claims_per_minute_hold_across_campaigns(
    service: CampaignService, clock: LedgerClock
) -> None:
    campaign_ids = three_campaigns(service)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_claims_per_minute=5)
    held = claims(service, campaign_ids, 12)
    assert len(held) == 5
    for claim in held:
        service.complete(claim, result_for(claim))
    assert claims(service, campaign_ids, 3) == []  # completions do not free the minute
    clock.advance(61)
    assert len(claims(service, campaign_ids, 12)) == 5


def test_reported_cost_counts_against_the_groups_cost_per_minute(
    service: CampaignService, clock: LedgerClock
) -> None:
    campaign_ids = three_campaigns(service)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_cost_per_minute=1000)

    def costly(claim: ClaimedCase, heartbeat: Any) -> Outcome:
        return Outcome(result_for(claim), cost_units=400)

    done = [run_next_case(service, cid, "w-1", costly, clock) for cid in campaign_ids]
    assert all(outcome is not None and outcome.status == "succeeded" for outcome in done)
    assert service.group_usage(group).cost_last_minute == 1200
    assert claims(service, campaign_ids, 3) == []  # 1,200 of 1,000 spent this minute
    clock.advance(61)
    assert len(claims(service, campaign_ids, 3)) == 3


def test_a_group_cap_of_zero_pauses_every_campaign_in_it(service: CampaignService) -> None:
    campaign_ids = three_campaigns(service)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_claims_per_minute=0)
    assert claims(service, campaign_ids, 6) == []
    assert service.clear_group_limits(group) is True
    assert service.clear_group_limits(group) is False
    assert len(claims(service, campaign_ids, 6)) == 6


def test_limits_are_listed_and_shown(service: CampaignService) -> None:
    campaign_ids = three_campaigns(service)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits("zz-other", max_concurrent_leases=3)
    service.set_group_limits(group, max_concurrent_leases=20, max_claims_per_minute=600)
    listed = service.group_limits()
    assert [limits.key for limits in listed] == sorted([group, "zz-other"])
    shown = service.group_usage(group).as_payload()
    assert shown["max_concurrent_leases"] == 20 and shown["max_claims_per_minute"] == 600
    assert shown["live_leases"] == 0 and shown["at_cap"] is False
    with pytest.raises(CampaignBlocked) as missing:
        service.group_usage("nobody")
    assert missing.value.code == dom.NOT_FOUND


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.one_of(st.just(""), st.just(" "), st.text(min_size=201, max_size=210), st.just("a\x00")),
)
def test_a_bad_group_key_is_refused_and_changes_nothing(
    service: CampaignService, ledger_db: Database, key: str
) -> None:
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.set_group_limits(key, max_concurrent_leases=1)
    assert refused.value.code == dom.LIMIT_GROUP_INVALID
    plan = make_plan()
    with pytest.raises(CampaignBlocked) as refused:
        service.create(plan.policy, plan.suite, limit_group=key)
    assert refused.value.code == dom.LIMIT_GROUP_INVALID
    assert snapshot(ledger_db) == before


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cap=st.one_of(st.integers(max_value=-1), st.integers(min_value=10**9 + 1), st.just(1.5)))
def test_a_bad_group_cap_is_refused_and_changes_nothing(
    service: CampaignService, ledger_db: Database, cap: Any
) -> None:
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.set_group_limits("provider", max_claims_per_minute=cap)
    assert refused.value.code == dom.LIMIT_GROUP_INVALID
    assert snapshot(ledger_db) == before


@pytest.mark.parametrize("cost", [-1, 10**9 + 1, 2.5, True])
def test_a_bad_cost_is_refused_and_changes_nothing(
    service: CampaignService, cid: str, ledger_db: Database, cost: Any
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.complete(claim, result_for(claim), cost_units=cost)
    assert refused.value.code == dom.COST_INVALID
    assert snapshot(ledger_db) == before


@pytest.mark.parametrize("name", ["", "has space", "x" * 201, "semi;colon", 7])
def test_a_bad_evaluator_name_is_refused(
    service: CampaignService, ledger_db: Database, name: Any
) -> None:
    plan = make_plan()
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.create(plan.policy, plan.suite, evaluator=name)
    assert refused.value.code == dom.EVALUATOR_INVALID
    assert snapshot(ledger_db) == before


def test_the_evaluator_name_is_stored_and_can_change(
    service: CampaignService, ledger_db: Database
) -> None:
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite, evaluator="evals.judge:score")
    assert service.create(plan.policy, plan.suite) == cid
    assert service.status(cid).evaluator == "evals.judge:score"
    service.create(plan.policy, plan.suite, evaluator="evals.judge:score_v2")
    assert service.status(cid).evaluator == "evals.judge:score_v2"
