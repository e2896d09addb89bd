"""Throttling is not failure: a throttled attempt costs the item no attempt, within budget.

``Throttled`` (or a retryable ``DependencyFailed`` with ``retry_after``) hands
the item back, due no earlier than ``retry_after``; the attempt history records
it; ``verify()`` accepts the history; past ``max_throttles`` a throttle spends
an attempt (``throttles_spent``) so an item throttled for ever still ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import CampaignBlocked, DependencyFailed, Throttled
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.drivers import run_next_case
from benchledger.workers.loop import Worker

from .helpers import make_policy, make_suite, result_for, snapshot, work_row

Heartbeat = Callable[[], None]


def throttled(retry_after: float | None, code: str = "api.http_429") -> Any:
    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        raise Throttled(retry_after, code=code)

    return evaluate


def test_a_throttle_hands_the_item_back_without_spending_its_attempt(
    service: CampaignService, cid: str, clock: LedgerClock, ledger_db: Database
) -> None:
    outcome = run_next_case(service, cid, "w-1", throttled(2.0), clock)
    assert outcome is not None
    assert outcome.status == dom.WorkStatus.RETRY_WAIT
    assert outcome.attempt == 0  # given back
    assert outcome.error_code == "benchmark.campaign.throttled.api.http_429"
    # Due no earlier than the provider asked (and at most a tenth later).
    assert clock() + 2.0 <= outcome.next_attempt_at <= clock() + 2.2
    row = work_row(ledger_db, outcome.work_id)
    assert (row.throttles, row.attempts) == (1, 0)
    history = service.attempts(cid, work_id=outcome.work_id).attempts
    assert [(a.attempt, a.outcome, a.error_code) for a in history] == [
        (1, "throttled", "benchmark.campaign.throttled.api.http_429")
    ]


def test_a_throttled_item_is_not_claimed_before_retry_after(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    first = run_next_case(service, cid, "w-1", throttled(2.0), clock)
    assert first is not None
    seen: list[str] = []

    def record(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        seen.append(claim.work_id)
        return result_for(claim)

    while run_next_case(service, cid, "w-1", record, clock) is not None:
        pass
    assert first.work_id not in seen  # the other items ran, this one waits
    clock.advance(1.9)
    assert run_next_case(service, cid, "w-1", record, clock) is None
    clock.advance(0.4)
    done = run_next_case(service, cid, "w-1", record, clock)
    assert done is not None and done.work_id == first.work_id
    assert done.status == "succeeded" and done.attempt == 1  # the throttle cost nothing
    history = service.attempts(cid, work_id=first.work_id).attempts
    assert [(a.attempt, a.outcome) for a in history] == [(1, "throttled"), (1, "succeeded")]
    assert service.verify(cid).ok


def test_a_dependency_failure_with_retry_after_is_a_throttle(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        raise DependencyFailed("api.http_503", retryable=True, retry_after=5)

    outcome = run_next_case(service, cid, "w-1", evaluate, clock)
    assert outcome is not None and outcome.attempt == 0
    assert outcome.error_code == "benchmark.campaign.throttled.api.http_503"

    def fatal(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        raise DependencyFailed("api.http_400", retryable=False, retry_after=5)

    failed = run_next_case(service, cid, "w-1", fatal, clock)
    assert failed is not None and failed.status == "failed"  # not retryable: no throttle


def test_without_retry_after_the_throttle_backoff_applies(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    outcome = run_next_case(service, cid, "w-1", throttled(None), clock)
    assert outcome is not None
    # The default throttle base is 1 s, plus up to half of it at random.
    assert clock() + 1.0 <= outcome.next_attempt_at <= clock() + 1.5


def test_past_the_budget_a_throttle_spends_attempts_until_the_item_fails(
    service: CampaignService, plan: CampaignPlan, clock: LedgerClock, ledger_db: Database
) -> None:
    cid = service.create(plan.policy, plan.suite, max_attempts=2, max_throttles=3)
    work_id = None
    statuses = []
    for _ in range(10):
        claim = service.claim(cid, "w-1", lease_seconds=60)
        if claim is None:
            break
        if work_id is None:
            work_id = claim.work_id
        if claim.work_id != work_id:
            service.complete(claim, result_for(claim))
            continue
        outcome = service.throttle(claim, "api.http_429", retry_after=0)
        statuses.append((outcome.status, outcome.attempt, outcome.error_code))
    assert statuses == [
        ("retry_wait", 0, "benchmark.campaign.throttled.api.http_429"),
        ("retry_wait", 0, "benchmark.campaign.throttled.api.http_429"),
        ("retry_wait", 0, "benchmark.campaign.throttled.api.http_429"),
        ("retry_wait", 1, dom.THROTTLES_SPENT),
        ("failed", 2, dom.THROTTLES_SPENT),
    ]
    outcomes = [a.outcome for a in service.attempts(cid, work_id=work_id).attempts]
    assert outcomes == ["throttled"] * 3 + ["retry_scheduled", "failed"]
    assert work_row(ledger_db, str(work_id)).throttles == 5
    assert service.verify(cid).ok


def test_status_counts_throttled_items_and_when_the_next_is_due(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    outcome = run_next_case(service, cid, "w-1", throttled(30.0), clock)
    assert outcome is not None
    status = service.status(cid)
    assert status.throttled == 1
    assert status.throttled_due_at == outcome.next_attempt_at
    assert status.counts["retry_wait"] == 1


def test_a_worker_rides_out_throttling_without_failing_anything(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    calls: dict[str, int] = {}

    def flaky(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        calls[claim.work_id] = calls.get(claim.work_id, 0) + 1
        if calls[claim.work_id] <= 4:
            raise Throttled(0.5)
        return result_for(claim)

    worker = Worker(
        service, cid, "w-1", flaky, clock=clock, sleep=clock.advance, until_finished=True
    )
    summary = worker.run()
    assert summary.failed == 0 and summary.throttled == 4 * len(calls)
    status = service.status(cid)
    assert status.counts["succeeded"] == status.work_count
    assert all(a.attempt == 1 for a in service.attempts(cid).attempts)
    assert service.verify(cid).ok


@pytest.mark.parametrize(
    "retry_after", [-1, float("nan"), float("inf"), "2", True, 86_400.5, 10**400]
)
def test_a_bad_retry_after_is_refused_and_changes_nothing(
    service: CampaignService, cid: str, ledger_db: Database, retry_after: Any
) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=60)
    assert claim is not None
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.throttle(claim, "api.http_429", retry_after=retry_after)
    assert refused.value.code == dom.DURATION_INVALID
    assert snapshot(ledger_db) == before


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "2", True])
def test_throttled_refuses_a_bad_retry_after(value: Any) -> None:
    with pytest.raises(ValueError, match="retry_after"):
        Throttled(value)


def test_a_throttle_of_a_lost_lease_is_lease_lost(
    service: CampaignService, cid: str, clock: LedgerClock, ledger_db: Database
) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=10)
    assert claim is not None
    clock.advance(11)
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as lost:
        service.throttle(claim, "api.http_429", retry_after=1)
    assert lost.value.code == dom.LEASE_LOST
    assert snapshot(ledger_db) == before


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(max_throttles=st.one_of(st.integers(-5, 0), st.integers(10**6 + 1, 10**7), st.just(True)))
def test_create_refuses_a_bad_throttle_budget(
    service: CampaignService, plan: CampaignPlan, ledger_db: Database, max_throttles: Any
) -> None:
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.create(plan.policy, plan.suite, max_throttles=max_throttles)
    assert refused.value.code == dom.THROTTLES_INVALID
    assert snapshot(ledger_db) == before


def test_the_throttle_budget_is_stored_per_item(
    service: CampaignService, plan: CampaignPlan, ledger_db: Database
) -> None:
    cid = service.create(plan.policy, plan.suite, max_throttles=7)
    claim = service.claim(cid, "w-1", lease_seconds=60)
    assert claim is not None
    assert work_row(ledger_db, claim.work_id).max_throttles == 7


def test_health_says_what_waits_on_throttling(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    assert "throttled" not in service.health(cid).as_payload()  # the v1 keys, as before
    outcome = run_next_case(service, cid, "w-1", throttled(30.0), clock)
    assert outcome is not None
    health = service.health(cid)
    assert (health.throttled, health.throttled_due_at) == (1, outcome.next_attempt_at)
    assert health.as_payload()["throttled"] == 1
    # Degraded, as for any item waiting after an error, with the throttle's code as reason.
    assert health.status == "degraded"
    assert "benchmark.campaign.error.throttled.api.http_429" in health.reasons


def test_a_429_with_retry_after_2_is_not_retried_before_2_seconds(
    ledger_db: Database, plan: CampaignPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real time, a real HTTP model: one request per 2 s window, so the second of two
    items is answered 429 with ``Retry-After: 2`` and must wait that long."""
    from benchledger.examples import model_api
    from benchledger.testing.model_server import ModelServer

    service = CampaignService(ledger_db)  # the wall clock
    made = CampaignPlan(make_policy(make_suite(1), ("de-DE", "fr-FR")), make_suite(1))
    cid = service.create(made.policy, made.suite)
    with ModelServer(per_minute=1, window_seconds=2.0) as server:
        monkeypatch.setenv(model_api.URL_ENV, server.url)
        summary = Worker(
            service, cid, "w-1", model_api.evaluate, until_finished=True, poll_seconds=0.1
        ).run()
        stats = server.stats()
    assert summary.failed == 0 and stats.throttled >= 1
    history = service.attempts(cid).attempts
    waits = []
    for work_id in {a.work_id for a in history}:
        rows = [a for a in history if a.work_id == work_id]
        for before, after in itertools.pairwise(rows):
            if before.outcome == "throttled":
                assert after.claimed_at is not None
                waits.append(after.claimed_at - before.finished_at)
    assert waits and min(waits) >= 2.0, waits
    assert all(a.attempt == 1 for a in history)
    assert service.verify(cid).ok
