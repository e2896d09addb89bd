"""Many cases in flight in one process: Worker(concurrency=K) threads and AsyncWorker.

Each scenario runs with both (``flavor``) on both backends, against real
databases: every item succeeds exactly once, a raising evaluator's case is
failed with its code and retried as one at a time, an evaluator that runs past
its lease keeps it through the heartbeat, a lease lost meanwhile is counted,
and stopping lets the cases in flight finish.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_results import CaseOutcome, ClaimedCase
from benchledger.errors import DependencyFailed, LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.loop import Worker, WorkerProgress, WorkerSummary
from benchledger.workpool import pool_size_for
from campaign.helpers import make_plan

from .evaluators import result_of

#: What a case does: (seconds it takes, the error it raises or None).
Behaviour = Callable[[ClaimedCase], tuple[float, BaseException | None]]


@pytest.fixture(params=["threads", "asyncio"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class InFlight:
    """Counts cases being evaluated at once (thread- and task-safe)."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def enter(self, claim: ClaimedCase) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.calls[claim.work_id] += 1

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def run(
    flavor: str,
    db: Database,
    campaign_id: str,
    behave: Behaviour,
    *,
    concurrency: int,
    in_flight: InFlight | None = None,
    clock: Callable[[], float] = time.time,
    on_worker: Callable[[Any], None] | None = None,
    **options: Any,
) -> WorkerSummary:
    """Run one worker of ``flavor`` (its own connection pool) with cases behaving as told."""
    counter = in_flight or InFlight()
    options.setdefault("retry_base_seconds", 0)
    if flavor == "threads":

        def evaluate(claim: ClaimedCase, heartbeat: Callable[[], None]) -> dict[str, Any]:
            counter.enter(claim)
            try:
                seconds, error = behave(claim)
                time.sleep(seconds)
                heartbeat()
                if error is not None:
                    raise error
                return result_of(claim)
            finally:
                counter.leave()

        database = Database(db.url, pool_size=pool_size_for(concurrency))
        try:
            service = CampaignService(database, clock=clock)
            worker = Worker(
                service,
                campaign_id,
                "w-threads",
                evaluate,
                clock=clock,
                concurrency=concurrency,
                **options,
            )
            if on_worker is not None:
                on_worker(worker)
            return worker.run()
        finally:
            database.dispose()

    async def aevaluate(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
        counter.enter(claim)
        try:
            seconds, error = behave(claim)
            await asyncio.sleep(seconds)
            await heartbeat()
            if error is not None:
                raise error
            return result_of(claim)
        finally:
            counter.leave()

    async def main() -> WorkerSummary:
        database = AsyncDatabase(db.url, pool_size=pool_size_for(concurrency))
        try:
            worker = AsyncWorker(
                AsyncCampaignService(database, clock=clock),
                campaign_id,
                "w-asyncio",
                aevaluate,
                clock=clock,
                concurrency=concurrency,
                **options,
            )
            if on_worker is not None:
                on_worker(worker)
            return await worker.run()
        finally:
            await database.dispose()

    return asyncio.run(main())


def rows(db: Database, campaign_id: str) -> list[Any]:
    with db.engine.connect() as connection:
        return list(
            connection.execute(
                sa.text(
                    "SELECT work_id, suite_case_key, status, attempts, lease_losses,"
                    " last_error_code, result_json FROM benchmark_campaign_work"
                    " WHERE campaign_id = :c"
                ),
                {"c": campaign_id},
            )
        )


def test_32_in_flight_complete_every_item_exactly_once(flavor: str, ledger_db: Database) -> None:
    plan = make_plan(cases=32, locales=("de-DE", "fr-FR"))  # 64 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite)
    in_flight = InFlight()
    summary = run(
        flavor, ledger_db, cid, lambda claim: (1.0, None), concurrency=32, in_flight=in_flight
    )
    assert (summary.cases, summary.succeeded, summary.lost) == (64, 64, 0)
    assert summary.report is not None and summary.report.status == "succeeded"
    assert set(in_flight.calls.values()) == {1} and len(in_flight.calls) == 64
    assert in_flight.peak >= 16, in_flight.peak  # many at once, not one by one
    assert {(row.status, row.attempts) for row in rows(ledger_db, cid)} == {("succeeded", 1)}
    assert service.status(cid).report_finalization["status"] == "succeeded"


def test_a_raising_case_is_failed_with_its_code_and_retried(
    flavor: str, ledger_db: Database
) -> None:
    plan = make_plan(cases=6, locales=("de-DE",))
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=3)
    errors: dict[str, Callable[[], BaseException]] = {
        "case-0000": lambda: DependencyFailed("api.timeout", retryable=True),
        "case-0001": lambda: DependencyFailed("api.refused", retryable=False),
        "case-0002": lambda: RuntimeError("bug"),
        "case-0003": lambda: LedgerError("benchmark.campaign.result_invalid"),
    }

    def behave(claim: ClaimedCase) -> tuple[float, BaseException | None]:
        make = errors.get(claim.suite_case_key)
        return 0.05, (make() if make is not None and claim.attempt == 1 else None)

    outcomes: list[CaseOutcome] = []

    def progress(event: WorkerProgress) -> None:
        if isinstance(event.outcome, CaseOutcome):
            outcomes.append(event.outcome)

    summary = run(
        flavor, ledger_db, cid, behave, concurrency=4, progress=progress, until_finished=True
    )
    first = {o.suite_case_key: o for o in outcomes if o.attempt == 1}
    assert (first["case-0000"].status, first["case-0000"].error_code) == (
        "retry_wait",
        dom.DEPENDENCY_PREFIX + "api.timeout",
    )
    assert (first["case-0001"].status, first["case-0001"].error_code) == (
        "failed",
        dom.DEPENDENCY_PREFIX + "api.refused",
    )
    assert (first["case-0002"].status, first["case-0002"].error_code) == (
        "retry_wait",
        dom.UNEXPECTED,
    )
    assert (first["case-0003"].status, first["case-0003"].error_code) == (
        "failed",
        dom.RESULT_INVALID,
    )
    final = {row.suite_case_key: (row.status, row.attempts) for row in rows(ledger_db, cid)}
    assert final == {
        "case-0000": ("succeeded", 2),
        "case-0001": ("failed", 1),
        "case-0002": ("succeeded", 2),
        "case-0003": ("failed", 1),
        "case-0004": ("succeeded", 1),
        "case-0005": ("succeeded", 1),
    }
    assert (summary.cases, summary.succeeded, summary.failed, summary.retrying) == (8, 4, 2, 2)
    assert summary.report is None  # blocked for good: two items failed


def test_a_case_that_runs_past_its_lease_keeps_it_by_the_heartbeat(
    flavor: str, ledger_db: Database
) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite)
    summary = run(
        flavor,
        ledger_db,
        cid,
        lambda claim: (1.5, None),  # 2.5 leases long; renewed every third of a lease
        concurrency=2,
        lease_seconds=0.6,
    )
    assert (summary.succeeded, summary.lost) == (2, 0)
    assert {(row.status, row.attempts) for row in rows(ledger_db, cid)} == {("succeeded", 1)}


def test_a_lease_lost_meanwhile_is_counted_and_the_item_completed_once(
    flavor: str, ledger_db: Database, ledger_clock: LedgerClock
) -> None:
    plan = make_plan(cases=3, locales=("de-DE",))
    service = CampaignService(ledger_db, clock=ledger_clock)
    cid = service.create(plan.policy, plan.suite)
    stolen: list[ClaimedCase] = []

    def behave(claim: ClaimedCase) -> tuple[float, BaseException | None]:
        if claim.suite_case_key == "case-0001":
            # Our lease expires in the ledger's time and another worker takes the item.
            ledger_clock.advance(31)
            thief = service.claim(cid, "w-thief", lease_seconds=30)
            assert thief is not None and thief.work_id == claim.work_id
            stolen.append(thief)
        return 0.0, None

    summary = run(
        flavor,
        ledger_db,
        cid,
        behave,
        concurrency=1,
        lease_seconds=30,
        clock=ledger_clock,
        heartbeat_seconds=60,
    )
    assert summary.lost == 1 and summary.succeeded == 2
    service.complete(stolen[0], result_of(stolen[0]))
    final = {row.suite_case_key: (row.status, row.attempts) for row in rows(ledger_db, cid)}
    assert final["case-0001"] == ("succeeded", 1)  # the lost lease gave its attempt back
    assert [row.result_json for row in rows(ledger_db, cid)].count(None) == 0


def test_stopping_lets_the_cases_in_flight_finish_and_claims_nothing_more(
    flavor: str, ledger_db: Database
) -> None:
    plan = make_plan(cases=20, locales=("de-DE", "fr-FR"))  # 40 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite)
    in_flight = InFlight()
    stop = threading.Event()
    workers: list[Any] = []

    def behave(claim: ClaimedCase) -> tuple[float, BaseException | None]:
        if sum(in_flight.calls.values()) >= 8 and not stop.is_set():
            stop.set()
            if isinstance(workers[0], AsyncWorker):
                workers[0].stop()
        return 0.5, None

    options: dict[str, Any] = {}
    if flavor == "threads":
        options["should_stop"] = stop.is_set
    summary = run(
        flavor,
        ledger_db,
        cid,
        behave,
        concurrency=8,
        in_flight=in_flight,
        on_worker=workers.append,
        **options,
    )
    started = sum(in_flight.calls.values())
    assert summary.stopped
    assert 8 <= started < 40
    assert summary.cases == summary.succeeded == started
    counts = service.status(cid).counts
    assert (counts["leased"], counts["succeeded"], counts["pending"]) == (0, started, 40 - started)


def test_the_campaigns_concurrency_cap_holds_whatever_k(flavor: str, ledger_db: Database) -> None:
    plan = make_plan(cases=12, locales=("de-DE",))
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_concurrent_leases=3)
    in_flight = InFlight()
    summary = run(
        flavor,
        ledger_db,
        cid,
        lambda claim: (0.2, None),
        concurrency=12,
        in_flight=in_flight,
        until_finished=True,
        poll_seconds=0.1,
    )
    assert summary.succeeded == 12 and summary.report is not None
    assert in_flight.peak <= 3, in_flight.peak  # the claim enforces the cap for every lane
    assert set(in_flight.calls.values()) == {1}


def test_async_worker_checks_its_options_when_made(async_db: AsyncDatabase) -> None:
    """With Worker's codes, before run(): nothing is opened or read meanwhile."""
    campaigns = AsyncCampaignService(async_db)

    async def ok(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
        return result_of(claim)

    bad: list[tuple[dict[str, Any], str]] = [
        *(({"concurrency": k}, dom.WORKER_SETTING_INVALID) for k in (0, 1025, True, 2.0)),
        ({"max_cases": -1}, dom.WORKER_SETTING_INVALID),
        ({"finalize_report": "yes"}, dom.WORKER_SETTING_INVALID),
        ({"until_finished": 1}, dom.WORKER_SETTING_INVALID),
        ({"handle_signals": "yes"}, dom.WORKER_SETTING_INVALID),
        ({"should_stop": True}, dom.DEPENDENCY_INVALID),
        ({"progress": 1}, dom.DEPENDENCY_INVALID),
        ({"clock": "now"}, dom.DEPENDENCY_INVALID),
        ({"operation_guard": 1}, dom.DEPENDENCY_INVALID),
        ({"outage": 300}, dom.DEPENDENCY_INVALID),
        ({"poll_seconds": 0}, dom.DURATION_INVALID),
        ({"lease_seconds": -1}, dom.DURATION_INVALID),
        ({"retry_jitter": 2}, dom.RETRY_INVALID),
    ]
    for settings, code in bad:
        with pytest.raises(LedgerError) as caught:
            AsyncWorker(campaigns, "c", "w-1", ok, **settings)
        assert caught.value.code == code, settings
    for evaluate, service in ((None, campaigns), (ok, "service")):
        with pytest.raises(LedgerError) as caught:
            AsyncWorker(service, "c", "w-1", evaluate)  # type: ignore[arg-type]
        assert caught.value.code == dom.DEPENDENCY_INVALID
    assert campaigns._service is None  # the service was never opened
