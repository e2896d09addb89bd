"""Worker(until_finished=True): waits for retries and foreign leases, stops when asked."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import CampaignBlocked, DependencyFailed
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.loop import Worker, WorkerProgress

from .helpers import T0, execute, make_plan, result_for, work_row

Heartbeat = Callable[[], None]


def ok(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
    return result_for(claim)


class Sleeps:
    """A test's ``sleep``: moves the clock instead of waiting, and remembers each wait."""

    def __init__(self, clock: LedgerClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


def test_waits_for_a_retry_then_finishes(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def flaky_first(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        if claim.suite_case_key == "case-0000" and claim.attempt == 1:
            raise DependencyFailed("store.down", retryable=True)
        return result_for(claim)

    sleeps = Sleeps(clock)
    summary = Worker(
        service, cid, "w-1", flaky_first, clock=clock, until_finished=True, sleep=sleeps,
        poll_seconds=60,
    ).run()  # fmt: skip
    # The two retries fall due 5 s later: one wait of exactly that long, no polling.
    assert sleeps.waits == [5.0]
    assert (summary.cases, summary.succeeded, summary.retrying) == (8, 6, 2)
    assert summary.report is not None and summary.report.status == "succeeded"
    assert not summary.stopped
    assert service.status(cid).next_due_at is None


def test_waits_for_a_lease_held_elsewhere_at_most_poll_seconds_at_a_time(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    crashed = service.claim(cid, "other-host", lease_seconds=100)  # never completed
    assert crashed is not None
    sleeps = Sleeps(clock)
    summary = Worker(
        service, cid, "w-1", ok, clock=clock, until_finished=True, sleep=sleeps, poll_seconds=30
    ).run()
    assert sleeps.waits == [30.0, 30.0, 30.0, 10.0]  # until the lease expired, looking again
    assert (summary.cases, summary.succeeded) == (6, 6)
    assert summary.report is not None and summary.report.status == "succeeded"
    assert service.status(cid).error_counts == {}  # the swept item succeeded on its retry


def test_a_retried_report_is_waited_for(ledger_db: Database, clock: LedgerClock, cid: str) -> None:
    class FailsOnce(DefaultReportBuilder):
        calls = 0

        def build(
            self, policy: CampaignPolicy, suite: Suite, results: Sequence[Mapping[str, Any]]
        ) -> dict[str, Any]:
            FailsOnce.calls += 1
            if FailsOnce.calls == 1:
                raise DependencyFailed("signer.down", retryable=True)
            return super().build(policy, suite, results)

    service = CampaignService(ledger_db, clock=clock, report_builder=FailsOnce())
    sleeps = Sleeps(clock)
    events: list[WorkerProgress] = []
    summary = Worker(
        service, cid, "w-1", ok, clock=clock, until_finished=True, sleep=sleeps,
        progress=events.append, retry_base_seconds=7,
    ).run()  # fmt: skip
    assert sleeps.waits == [1.0] * 7  # the report retry is due in 7 s; default poll: 1 s
    assert [event.event for event in events] == ["case"] * 6 + ["report"] * 2
    assert summary.report is not None and summary.report.status == "succeeded"


def test_without_finalize_report_it_waits_for_another_worker_to_finalize(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    finalized: list[Any] = []

    def sleep(seconds: float) -> None:
        if not finalized:  # meanwhile, another worker finalizes the report
            finalized.append(Worker(service, cid, "w-2", ok, clock=clock).run().report)
        clock.advance(seconds)

    summary = Worker(
        service, cid, "w-1", ok, clock=clock, until_finished=True, finalize_report=False,
        sleep=sleep,
    ).run()  # fmt: skip
    assert (summary.cases, summary.report) == (6, None)
    assert finalized[0] is not None and finalized[0].status == "succeeded"
    assert service.status(cid).next_due_at is None


def test_ends_without_waiting_when_blocked_for_good(
    service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=3, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite, max_attempts=1)

    def broken_second(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        if claim.suite_case_key == "case-0001":
            raise DependencyFailed("locale.unsupported", retryable=False)
        return result_for(claim)

    sleeps = Sleeps(clock)
    summary = Worker(
        service, cid, "w-1", broken_second, clock=clock, until_finished=True, sleep=sleeps
    ).run()
    assert sleeps.waits == []
    assert (summary.cases, summary.succeeded, summary.failed, summary.report) == (3, 2, 1, None)
    assert service.status(cid).blocked


def test_should_stop_is_checked_between_cases(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    stop = threading.Event()
    evaluated: list[str] = []

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        evaluated.append(claim.work_id)
        if len(evaluated) == 2:
            stop.set()  # asked to stop mid-case: this case is still finished and recorded
        return result_for(claim)

    summary = Worker(
        service, cid, "w-1", evaluate, clock=clock, until_finished=True, should_stop=stop.is_set
    ).run()
    assert (summary.cases, summary.succeeded, summary.stopped, summary.report) == (2, 2, True, None)
    counts = service.status(cid).counts
    assert (counts["succeeded"], counts["leased"], counts["pending"]) == (2, 0, 4)
    assert all(work_row(ledger_db, work_id).lease_owner is None for work_id in evaluated)
    # Without until_finished too; and a stopped worker does not start the report.
    assert Worker(service, cid, "w-1", ok, clock=clock, should_stop=lambda: True).run() == (
        type(summary)(0, 0, 0, 0, None, 0, True)
    )


def test_a_stop_wakes_an_idle_worker(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    held = service.claim(cid, "other-host", lease_seconds=3600)
    assert held is not None
    stop = threading.Event()
    waits: list[float] = []

    def wait(seconds: float) -> bool:  # the stop event's wait: the host asks to stop meanwhile
        waits.append(seconds)
        stop.set()
        return stop.wait(seconds)

    summary = Worker(
        service, cid, "w-1", ok, clock=clock, until_finished=True, should_stop=stop.is_set,
        sleep=wait, poll_seconds=600,
    ).run()  # fmt: skip
    assert waits == [600.0] and summary.stopped
    assert summary.cases == 5


def test_work_due_but_not_claimable_is_polled_not_spun(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    """A due item no claim can take (here: a hand-edited row) costs one look per poll."""
    plan = make_plan(cases=1, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite)
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = max_attempts")
    sleeps = Sleeps(clock)

    def enough() -> bool:
        return len(sleeps.waits) >= 3

    summary = Worker(
        service, cid, "w-1", ok, clock=clock, until_finished=True, should_stop=enough,
        sleep=sleeps, poll_seconds=2,
    ).run()  # fmt: skip
    assert sleeps.waits == [2.0, 2.0, 2.0]
    assert summary.cases == 0 and summary.stopped
    assert service.status(cid).next_due_at == T0


def test_loop_settings_are_checked(service: CampaignService, cid: str) -> None:
    for poll in (0, -1, float("nan"), 86_401):
        with pytest.raises(CampaignBlocked) as caught:
            Worker(service, cid, "w-1", ok, poll_seconds=poll)
        assert caught.value.code == dom.DURATION_INVALID
    bad_settings: list[dict[str, Any]] = [
        {"should_stop": True},
        {"sleep": None},
        {"progress": 1},
        {"clock": "now"},
        {"operation_guard": 1},
        {"outage": 300},
    ]
    for settings in bad_settings:
        with pytest.raises(CampaignBlocked) as caught:
            Worker(service, cid, "w-1", ok, **settings)
        assert caught.value.code == dom.DEPENDENCY_INVALID, settings
    for settings in (
        {"max_cases": -1},
        {"max_cases": 1.5},
        {"max_cases": True},
        {"finalize_report": "yes"},
        {"until_finished": 1},
    ):
        with pytest.raises(CampaignBlocked) as caught:
            Worker(service, cid, "w-1", ok, **settings)
        assert caught.value.code == dom.WORKER_SETTING_INVALID, settings
    for evaluate in (None, "evaluate", 3):
        with pytest.raises(CampaignBlocked) as caught:
            Worker(service, cid, "w-1", evaluate)  # type: ignore[arg-type]
        assert caught.value.code == dom.DEPENDENCY_INVALID
    with pytest.raises(CampaignBlocked) as caught:
        Worker("service", cid, "w-1", ok)  # type: ignore[arg-type]
    assert caught.value.code == dom.DEPENDENCY_INVALID
    with pytest.raises(CampaignBlocked) as caught:
        Worker(service, cid, "w-1", ok, retry_jitter=2)
    assert caught.value.code == dom.RETRY_INVALID
    assert service.status(cid).counts["pending"] == 6
