"""run_next_case, run_report_finalization and Worker: error mapping, heartbeats, progress."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.domain.canonical import sha256_text
from benchledger.errors import CampaignBlocked, DependencyFailed, LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.drivers import run_next_case, run_report_finalization
from benchledger.workers.loop import Worker, WorkerProgress

from .helpers import T0, complete_all, make_plan, report_state, result_for, work_row

Heartbeat = Callable[[], None]


def ok(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
    return result_for(claim)


def raising(error: BaseException) -> Callable[[ClaimedCase, Heartbeat], Mapping[str, Any]]:
    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        raise error

    return evaluate


def test_one_case(service: CampaignService, cid: str, clock: LedgerClock) -> None:
    seen: list[ClaimedCase] = []

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        seen.append(claim)
        assert claim.job_payload["source"]["text"].startswith("Save your changes")
        return result_for(claim, 0.4)

    outcome = run_next_case(service, cid, "w-1", evaluate, clock)
    assert outcome is not None and outcome.status == "succeeded"
    assert outcome.work_id == seen[0].work_id


def test_nothing_due(service: CampaignService, cid: str, clock: LedgerClock) -> None:
    complete_all(service, cid)
    assert run_next_case(service, cid, "w-1", ok, clock) is None


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (
            DependencyFailed("store.down", retryable=True),
            "retry_wait",
            "benchmark.campaign.dependency.store.down",
        ),
        (
            DependencyFailed("store.gone", retryable=False),
            "failed",
            "benchmark.campaign.dependency.store.gone",
        ),
        (DependencyFailed("x" * 120, retryable=True), "retry_wait", dom.DEPENDENCY_FAILED),
        (LedgerError("judge.refused"), "failed", "judge.refused"),
        (RuntimeError("boom"), "retry_wait", dom.UNEXPECTED),
    ],
)
def test_evaluation_errors_are_recorded(
    service: CampaignService, cid: str, clock: LedgerClock, error: Exception, status: str, code: str
) -> None:
    outcome = run_next_case(service, cid, "w-1", raising(error), clock)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == (status, code)
    if status == "retry_wait":
        assert outcome.next_attempt_at == T0 + 5  # min(3600, 5 * 2**0)
    expected_detail = sha256_text("RuntimeError") if code == dom.UNEXPECTED else None
    assert outcome.error_detail_hash == expected_detail


def test_declared_retryability_and_duck_typed_dependencies(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    retryable = LedgerError("reviewer.busy")
    retryable.retryable = True  # type: ignore[attr-defined]
    outcome = run_next_case(service, cid, "w-1", raising(retryable), clock)
    assert outcome is not None and (outcome.status, outcome.error_code) == (
        "retry_wait",
        "reviewer.busy",
    )

    class HostFailure(Exception):
        benchmark_campaign_dependency_failure = True
        code = "host.quota"
        retryable = False

    outcome = run_next_case(service, cid, "w-1", raising(HostFailure()), clock)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == (
        "failed",
        "benchmark.campaign.dependency.host.quota",
    )


def test_backoff_grows_with_attempts(service: CampaignService, clock: LedgerClock) -> None:
    plan = make_plan(cases=1, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite, max_attempts=4)
    flaky = raising(DependencyFailed("store.down", retryable=True))
    delays = []
    for _ in range(3):
        outcome = run_next_case(
            service, cid, "w-1", flaky, clock, retry_base_seconds=2, retry_max_seconds=5
        )
        assert outcome is not None
        delays.append(outcome.next_attempt_at - clock.peek())
        clock.set(outcome.next_attempt_at)
    assert delays == [2, 4, 5]
    outcome = run_next_case(service, cid, "w-1", flaky, clock)
    assert outcome is not None and outcome.status == "failed"  # attempts spent


def test_jitter(service: CampaignService, cid: str, clock: LedgerClock) -> None:
    flaky = raising(DependencyFailed("store.down", retryable=True))
    outcome = run_next_case(service, cid, "w-1", flaky, clock, retry_jitter=0.5)
    assert outcome is not None
    assert T0 + 5 <= outcome.next_attempt_at <= T0 + 7.5


def test_rejected_results_are_recorded_at_once(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def wrong_case(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        return {
            **result_for(claim),
            "target_locale": "xx-XX" if claim.target_locale != "xx-XX" else "de-DE",
        }

    outcome = run_next_case(service, cid, "w-1", wrong_case, clock)
    assert outcome is not None and (outcome.status, outcome.error_code) == (
        "retry_wait",
        dom.RESULT_INVALID,
    )

    def other_case(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        result = result_for(claim)
        result["suite"] = {**result["suite"], "case_key": "case-0002"}
        return result

    outcome = run_next_case(service, cid, "w-1", other_case, clock)
    assert outcome is not None and outcome.error_code == dom.RESULT_MISMATCH


def test_heartbeat_keeps_a_long_evaluation_alive(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        for _ in range(3):
            clock.advance(200)
            heartbeat()
        clock.advance(200)
        return result_for(claim)

    outcome = run_next_case(service, cid, "w-1", slow, clock, heartbeat_seconds=3600)
    assert outcome is not None and outcome.status == "succeeded"


def test_without_heartbeat_the_lease_is_lost(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    taken: list[ClaimedCase] = []

    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        clock.advance(301)
        other = CampaignService(ledger_db, clock=clock).claim(cid, "w-2")
        assert other is not None
        taken.append(other)
        return result_for(claim)

    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", slow, clock, heartbeat_seconds=3600)
    assert caught.value.code == dom.LEASE_LOST
    assert work_row(ledger_db, taken[0].work_id).lease_owner == "w-2"


def test_heartbeat_reports_a_lost_lease(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        clock.advance(301)
        CampaignService(ledger_db, clock=clock).claim(cid, "w-2")
        heartbeat()
        raise AssertionError("heartbeat should have raised")

    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", slow, clock, heartbeat_seconds=3600)
    assert caught.value.code == dom.LEASE_LOST


def test_background_heartbeat_with_a_real_clock(ledger_db: Database, cid: str) -> None:
    service = CampaignService(ledger_db)  # the real clock

    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        time.sleep(1.6)  # longer than the lease: only the background renewals keep it
        return result_for(claim)

    outcome = run_next_case(service, cid, "w-1", slow, lease_seconds=1.0, heartbeat_seconds=0.2)
    assert outcome is not None and outcome.status == "succeeded"


def _heartbeat_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "benchledger-heartbeat"}


def test_one_heartbeat_thread_renews_case_after_case(ledger_db: Database, cid: str) -> None:
    """The background heartbeat thread outlives its case and renews the next one's lease."""
    service = CampaignService(ledger_db)  # the real clock
    seen: list[set[threading.Thread]] = []

    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        seen.append(_heartbeat_threads())
        time.sleep(1.3)  # longer than the lease: only the background renewals keep it
        return result_for(claim)

    for _ in range(3):
        outcome = run_next_case(service, cid, "w-1", slow, lease_seconds=1.0, heartbeat_seconds=0.2)
        assert outcome is not None and outcome.status == "succeeded"
    assert seen[0] and seen[1] == seen[0] and seen[2] == seen[0]  # no thread started since


def test_a_heartbeat_thread_looks_as_often_as_its_shortest_lease_needs(
    ledger_db: Database, cid: str
) -> None:
    """A thread that served a long lease (looking once a second) is woken for a keeper
    whose lease is shorter than that: its renewals are not a second late."""
    service = CampaignService(ledger_db)  # the real clock

    def quick(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        return result_for(claim)

    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        time.sleep(1.6)  # longer than the lease: only the background renewals keep it
        return result_for(claim)

    first = run_next_case(service, cid, "w-1", quick, lease_seconds=3600, heartbeat_seconds=60)
    assert first is not None and first.status == "succeeded"
    outcome = run_next_case(service, cid, "w-1", slow, lease_seconds=0.6, heartbeat_seconds=0.15)
    assert outcome is not None and outcome.status == "succeeded"


def test_a_heartbeat_thread_whose_renewal_failed_serves_the_next_case(
    ledger_db: Database, cid: str
) -> None:
    """A failed background renewal ends that lease's heartbeat, not the thread: the
    driver gets the failure, and the next case's lease is renewed on the same thread."""
    service = CampaignService(ledger_db)  # the real clock
    guard_calls = 0
    seen: list[set[threading.Thread]] = []

    def guard(lease_seconds: float) -> None:
        nonlocal guard_calls
        guard_calls += 1
        if guard_calls == 2:  # the first background renewal (the first call: before work)
            raise OSError("host says stop")

    def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        seen.append(_heartbeat_threads())
        time.sleep(1.3)  # longer than the lease: only the background renewals keep it
        return result_for(claim)

    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(
            service,
            cid,
            "w-1",
            slow,
            operation_guard=guard,
            lease_seconds=1.0,
            heartbeat_seconds=0.2,
        )
    assert caught.value.code == dom.OPERATION_GUARD_FAILED and guard_calls == 2
    outcome = run_next_case(
        service, cid, "w-1", slow, operation_guard=guard, lease_seconds=1.0, heartbeat_seconds=0.2
    )
    assert outcome is not None and outcome.status == "succeeded" and guard_calls > 3
    assert seen[0] and seen[1] == seen[0]  # the same thread, no new one


def _case_in_forked_child(url: str, campaign_id: str) -> None:
    database = Database(url)
    try:
        service = CampaignService(database)

        def slow(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
            time.sleep(1.3)
            return result_for(claim)

        outcome = run_next_case(
            service, campaign_id, "w-child", slow, lease_seconds=1.0, heartbeat_seconds=0.2
        )
        assert outcome is not None and outcome.status == "succeeded"
    finally:
        database.dispose()


def test_a_forked_child_starts_its_own_heartbeat(
    ledger_db: Database, ledger_backend: str, cid: str
) -> None:
    """A child forked after the parent kept a heartbeat thread does not wait for that
    thread (the child has none of the parent's threads): its leases are renewed."""
    if ledger_backend != "sqlite":
        pytest.skip("backend-independent: run on SQLite")
    parent = CampaignService(ledger_db)
    run_next_case(parent, cid, "w-parent", ok, lease_seconds=1.0, heartbeat_seconds=0.2)
    assert _heartbeat_threads()  # kept, idle, for the next case
    child = multiprocessing.get_context("fork").Process(
        target=_case_in_forked_child, args=(ledger_db.url, cid)
    )
    child.start()
    try:
        child.join(60)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()


def test_policy_expiring_mid_run(service: CampaignService, clock: LedgerClock) -> None:
    plan = make_plan(valid_until=T0 + 100)
    cid = service.create(plan.policy, plan.suite)

    def outlives_policy(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        clock.advance(101)
        heartbeat()
        return result_for(claim)

    outcome = run_next_case(service, cid, "w-1", outlives_policy, clock, heartbeat_seconds=3600)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", dom.VALIDITY_EXPIRED)

    clock.set(T0)

    def returns_late(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        clock.advance(101)
        return result_for(claim)

    outcome = run_next_case(service, cid, "w-1", returns_late, clock, heartbeat_seconds=3600)
    assert outcome is not None and outcome.error_code == dom.VALIDITY_EXPIRED


def test_operation_guard_failure_propagates(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def guard(lease_seconds: float) -> None:
        raise OSError("host says stop")

    def beating(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        heartbeat()
        return result_for(claim)

    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(
            service, cid, "w-1", beating, clock, operation_guard=guard, heartbeat_seconds=3600
        )
    assert caught.value.code == dom.OPERATION_GUARD_FAILED


def test_driver_settings_are_checked(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", ok, clock, retry_base_seconds=10, retry_max_seconds=5)
    assert caught.value.code == dom.RETRY_INVALID
    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", ok, clock, retry_jitter=2)
    assert caught.value.code == dom.RETRY_INVALID
    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", ok, clock, lease_seconds=0)
    assert caught.value.code == dom.DURATION_INVALID
    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", "evaluate", clock)  # type: ignore[arg-type]
    assert caught.value.code == dom.DEPENDENCY_INVALID
    with pytest.raises(CampaignBlocked) as caught:
        run_next_case("store", cid, "w-1", ok, clock)  # type: ignore[arg-type]
    assert caught.value.code == dom.DEPENDENCY_INVALID
    assert service.status(cid).counts["pending"] == 6


# -- report finalization ---------------------------------------------------------------------------


def test_report_finalization(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    complete_all(service, cid)
    outcome = run_report_finalization(service, cid, "r-1", clock)
    assert outcome is not None and (outcome.status, outcome.attempt) == ("succeeded", 1)
    assert service.load_report(cid)["overall"]["items"] == 6
    assert run_report_finalization(service, cid, "r-1", clock) is None


class FlakyBuilder(DefaultReportBuilder):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def build(
        self, policy: CampaignPolicy, suite: Suite, results: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        raise self.error


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        # A builder's uncoded failure is report_unexpected, retried with backoff.
        (ValueError("bad numbers"), "retry_wait", dom.REPORT_UNEXPECTED),
        (DependencyFailed("signer.down", retryable=True), "retry_wait", "signer.down"),
        (DependencyFailed("signer.revoked", retryable=False), "failed", "signer.revoked"),
    ],
)
def test_report_failures(
    ledger_db: Database, clock: LedgerClock, cid: str, error: Exception, status: str, code: str
) -> None:
    service = CampaignService(ledger_db, clock=clock, report_builder=FlakyBuilder(error))
    complete_all(service, cid)
    outcome = run_report_finalization(service, cid, "r-1", clock, retry_base_seconds=7)
    assert outcome is not None and (outcome.status, outcome.error_code) == (status, code)
    assert outcome.error_detail_hash == sha256_text(
        type(error).__name__ if code != dom.REPORT_INVALID else "CampaignBlocked"
    )
    if status == "retry_wait":
        assert outcome.next_attempt_at == T0 + 7
    assert report_state(ledger_db, cid).status == status


def test_report_driver_settings(service: CampaignService, cid: str, clock: LedgerClock) -> None:
    for call, code in (
        (
            lambda: run_report_finalization("store", cid, "r-1", clock),
            dom.REPORT_DEPENDENCY_INVALID,
        ),  # type: ignore[arg-type]
        (
            lambda: run_report_finalization(service, cid, "r-1", "clock"),
            dom.REPORT_DEPENDENCY_INVALID,
        ),  # type: ignore[arg-type]
        (
            lambda: run_report_finalization(service, cid, "r-1", clock, operation_guard=5),
            dom.REPORT_DEPENDENCY_INVALID,
        ),  # type: ignore[arg-type]
        (
            lambda: run_report_finalization(
                service, cid, "r-1", clock, retry_base_seconds=9, retry_max_seconds=1
            ),
            dom.REPORT_RETRY_INVALID,
        ),
    ):
        with pytest.raises(CampaignBlocked) as caught:
            call()
        assert caught.value.code == code


# -- Worker -------------------------------------------------------------------------------------


def test_worker_runs_the_campaign_to_its_report(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    events: list[WorkerProgress] = []
    summary = Worker(service, cid, "w-1", ok, clock=clock, progress=events.append).run()
    assert (summary.cases, summary.succeeded, summary.retrying, summary.failed) == (6, 6, 0, 0)
    assert summary.report is not None and summary.report.status == "succeeded"
    assert [event.event for event in events] == ["case"] * 6 + ["report"]
    assert [event.cases for event in events] == [1, 2, 3, 4, 5, 6, 6]
    assert service.health(cid).status == "healthy"


def test_worker_stops_when_nothing_is_due(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def flaky_first(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        if claim.suite_case_key == "case-0000" and claim.attempt == 1:
            raise DependencyFailed("store.down", retryable=True)
        return result_for(claim)

    summary = Worker(service, cid, "w-1", flaky_first, clock=clock).run()
    assert (summary.cases, summary.succeeded, summary.retrying, summary.report) == (6, 4, 2, None)
    clock.advance(5)
    summary = Worker(service, cid, "w-1", flaky_first, clock=clock).run()
    assert (summary.cases, summary.succeeded) == (2, 2)
    assert summary.report is not None and summary.report.status == "succeeded"


def test_worker_max_cases(service: CampaignService, cid: str, clock: LedgerClock) -> None:
    summary = Worker(service, cid, "w-1", ok, clock=clock, max_cases=2).run()
    assert (summary.cases, summary.report) == (2, None)
    with pytest.raises(CampaignBlocked) as caught:
        Worker(service, cid, "w-1", ok, max_cases=-1)
    assert caught.value.code == dom.WORKER_SETTING_INVALID
    with pytest.raises(CampaignBlocked):
        Worker(service, cid, "", ok)


def test_plan_fixture_is_consistent(plan: CampaignPlan, cid: str) -> None:
    assert plan.campaign_id == cid


class ListBuilder(DefaultReportBuilder):
    def build(
        self, policy: CampaignPolicy, suite: Suite, results: Sequence[Mapping[str, Any]]
    ) -> Any:
        return [1, 2, 3]

    def verify(
        self,
        report: Any,
        policy: CampaignPolicy,
        suite: Suite,
        results: Sequence[Mapping[str, Any]],
    ) -> None:
        return None


def test_a_report_must_be_an_object(ledger_db: Database, clock: LedgerClock, cid: str) -> None:
    service = CampaignService(ledger_db, clock=clock, report_builder=ListBuilder())
    complete_all(service, cid)
    with pytest.raises(CampaignBlocked) as caught:
        service.summarize(cid)
    assert caught.value.code == dom.REPORT_INVALID


def test_ports_are_checked(ledger_db: Database) -> None:
    for kwargs in ({"clock": 5}, {"result_verifier": object()}, {"report_builder": object()}):
        with pytest.raises(CampaignBlocked) as caught:
            CampaignService(ledger_db, **kwargs)  # type: ignore[arg-type]
        assert caught.value.code == dom.DEPENDENCY_INVALID


def test_operation_guard_runs_before_a_quick_evaluation(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    """The driver renews (policy, guard, lease) before any work, not only on heartbeats."""
    guarded: list[float] = []
    evaluated: list[str] = []

    def quick(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        evaluated.append(claim.work_id)
        return result_for(claim)

    outcome = run_next_case(
        service, cid, "w-1", quick, clock, operation_guard=guarded.append, heartbeat_seconds=3600
    )
    assert outcome is not None and outcome.status == "succeeded"
    assert guarded == [300.0]

    def refuse(lease_seconds: float) -> None:
        raise OSError("host is shutting down")

    with pytest.raises(CampaignBlocked) as caught:
        run_next_case(service, cid, "w-1", quick, clock, operation_guard=refuse)
    assert caught.value.code == dom.OPERATION_GUARD_FAILED
    assert len(evaluated) == 1  # the refused case was never evaluated
    assert service.status(cid).counts["leased"] == 1  # it comes back when its lease expires


class CountingRenewals(CampaignService):
    renewals = 0

    def renew(
        self, claim: ClaimedCase, now: float | None = None, lease_seconds: float = 300
    ) -> Any:
        self.renewals += 1
        return super().renew(claim, now=now, lease_seconds=lease_seconds)


@pytest.mark.parametrize(("gone", "writes"), [(0.0, 0), (2.9, 0), (3.1, 1)])
def test_a_just_granted_lease_is_not_written_again_before_work(
    ledger_db: Database, cid: str, gone: float, writes: int
) -> None:
    """The check before work renews the lease only once 1 % of it (3 s of 300) is gone."""
    service = CountingRenewals(ledger_db)
    ticks = iter([T0, T0 + gone])  # the claim, then the check before work

    def clock() -> float:
        return next(ticks, T0 + gone)

    outcome = run_next_case(service, cid, "w-1", ok, clock, heartbeat_seconds=3600)
    assert outcome is not None and outcome.status == "succeeded"
    assert service.renewals == writes


def test_policy_expired_before_evaluating(service: CampaignService, clock: LedgerClock) -> None:
    """Validity is checked before the evaluator runs (the first renewal)."""
    plan = make_plan(valid_until=T0 + 100)
    cid = service.create(plan.policy, plan.suite)
    evaluated: list[str] = []
    ticks = iter([T0 + 100, T0 + 101])  # the claim is in time; the work would not be

    def late_clock() -> float:
        return next(ticks, T0 + 101)

    def quick(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        evaluated.append(claim.work_id)
        return result_for(claim)

    outcome = run_next_case(service, cid, "w-1", quick, late_clock, heartbeat_seconds=3600)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", dom.VALIDITY_EXPIRED)
    assert evaluated == []


class SelfContradictingBuilder(DefaultReportBuilder):
    def verify(
        self,
        report: Mapping[str, Any],
        policy: CampaignPolicy,
        suite: Suite,
        results: Sequence[Mapping[str, Any]],
    ) -> None:
        raise ValueError("not the report its results produce")


def test_builder_failures_are_retried_bad_reports_are_terminal(
    ledger_db: Database, clock: LedgerClock, cid: str
) -> None:
    flaky = CampaignService(ledger_db, clock=clock, report_builder=FlakyBuilder(OSError("disk")))
    complete_all(flaky, cid)
    with pytest.raises(OSError):
        flaky.summarize(cid)  # the builder's own failure, let through as it is
    outcome = run_report_finalization(flaky, cid, "r-1", clock)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("retry_wait", dom.REPORT_UNEXPECTED)
    assert outcome.error_detail_hash == sha256_text("OSError")
    clock.advance(5)
    strict = CampaignService(ledger_db, clock=clock, report_builder=SelfContradictingBuilder())
    outcome = run_report_finalization(strict, cid, "r-1", clock)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", dom.REPORT_INVALID)
    assert report_state(ledger_db, cid).attempts == 2


def test_worker_goes_on_after_losing_a_lease(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    """A lost lease (expired, re-claimed by another worker) is counted; the loop goes on."""
    taken: list[ClaimedCase] = []

    def slow_first(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        if not taken:
            clock.advance(301)
            other = CampaignService(ledger_db, clock=clock).claim(cid, "w-2", lease_seconds=3600)
            assert other is not None and other.work_id == claim.work_id
            taken.append(other)
        return result_for(claim)

    events: list[WorkerProgress] = []
    summary = Worker(
        service, cid, "w-1", slow_first, clock=clock, heartbeat_seconds=3600, progress=events.append
    ).run()
    assert (summary.cases, summary.succeeded, summary.lost, summary.report) == (6, 5, 1, None)
    assert events[0].outcome is None and events[0].lost == 1
    assert work_row(ledger_db, taken[0].work_id).lease_owner == "w-2"
    service.complete(taken[0], result_for(taken[0]))
    summary = Worker(service, cid, "w-1", ok, clock=clock).run()
    assert summary.report is not None and summary.report.status == "succeeded"
