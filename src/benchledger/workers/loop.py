"""The worker loop: claim, evaluate and record case after case, then finalize the report.

:class:`Worker` runs a campaign's cases one by one, or ``concurrency`` at a
time on lanes that share a :class:`Tally`; each attempt is one of the drivers'
(:mod:`benchledger.workers.drivers`). It reports a :class:`WorkerProgress`
after every attempt and returns a :class:`WorkerSummary`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import attrs

from benchledger.db.notify import ANY_CAMPAIGN
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus, blocked
from benchledger.domain.campaign_results import CaseOutcome, ReportOutcome
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.errors import CampaignBlocked
from benchledger.faults import Outage, OutagePolicy
from benchledger.ports.campaign import Evaluate
from benchledger.services.campaigns import CampaignService
from benchledger.workers.batching import ClaimBuffer, Committer
from benchledger.workers.drivers import REPORT_LOST, DriverContext, attempt_case, attempt_report
from benchledger.workers.idle import IdleWait
from benchledger.workers.lanes import LaneLimit
from benchledger.workers.lease import THREADS, Clock, Runtime
from benchledger.workers.options import (
    DEFAULTS,
    OperationGuard,
    WorkerOptions,
)
from benchledger.workers.tally import Tally, WorkerProgress, WorkerSummary

__all__ = ["Tally", "Worker", "WorkerProgress", "WorkerSummary"]


class Worker:
    """Runs a campaign's cases (one by one, or ``concurrency`` at a time), then its report.

    By default ``run`` returns as soon as no case is due, after one report
    attempt if every item has succeeded. With ``until_finished=True`` it keeps
    going until the campaign is finished: the report is finalized (or failed
    for good), or every item is final and some failed (blocked for good).
    Meanwhile it waits for retries that are not due yet and for leases held
    elsewhere (another process or machine may crash and leave its item to
    come back): it sleeps until the campaign's ``next_due_at`` (see
    :class:`~benchledger.domain.campaign_views.CampaignStatus`), at most
    ``poll_seconds`` at a time, since other workers can make work due sooner
    (a failed attempt's retry, the last success making the report due).
    With ``finalize_report=False`` it leaves the report to other workers and
    waits, like for any other work, until one of them has finalized it.

    ``should_stop`` (optional, e.g. ``threading.Event().is_set``) is checked
    before every claim and report attempt, never during one: once it says
    true, the worker finishes the case it holds (recording its result or
    failure, so no lease is left held) and returns. ``sleep(seconds)`` is how
    an idle worker waits (default :func:`time.sleep`); pass the stop event's
    ``wait`` to wake at once when asked to stop, or a test clock's ``advance``.

    ``progress`` (optional) is called with a :class:`WorkerProgress` after every
    case and after every report attempt. ``max_cases`` bounds one ``run``.

    ``concurrency=K`` keeps up to K cases in flight in this process: K lanes
    on a thread pool, each running the loop above (claim, evaluate under its
    own lease keeper, record) with the same stop, retry, fault and lost-lease
    rules; for a plain ``def evaluate`` that blocks on I/O (an HTTP call to a
    model). ``evaluate`` and ``progress`` are then called from several threads
    (``progress`` one call at a time). A case holds a database connection only
    while one of its short transactions runs, so a pool of a few connections
    serves many cases (``Database(pool_size=...)``; a case that finds none free
    waits its turn). For ``async def`` evaluators see
    :class:`benchledger.aio.AsyncWorker`.

    A case whose lease is lost meanwhile (``lease_lost``: it expired and the
    item went back to the queue, maybe to another worker) is counted as
    ``lost`` and the loop goes on; so is a lost report lease (``lost_reports``).
    The loop still ends: every claim spends one of an item's bounded attempts. Other errors
    (``operation_guard_failed``, ``validity_expired`` on claim, ...) propagate.

    Database faults never end the run nor cost an item an attempt: every call
    the worker makes is retried through them with capped, jittered backoff
    (each logged on the ``benchledger`` loggers) for as long as ``outage``
    allows (an :class:`~benchledger.faults.OutagePolicy`; five minutes of
    continuous outage by default). A result computed meanwhile is kept and
    written once the database is back, if its lease still lives. When the
    database stays away longer, ``run`` raises
    :class:`~benchledger.faults.DatabaseUnavailable`
    (``ledger.database.unavailable``).

    The keyword settings (leases, retries, heartbeat, guard, outage, polling,
    concurrency, ``max_cases``, ``finalize_report``, ``until_finished``) are a
    :class:`~benchledger.workers.options.WorkerOptions`, built and checked
    here; :meth:`from_options` takes one already built.
    """

    def __init__(
        self,
        campaigns: CampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: Evaluate,
        *,
        clock: Clock = time.time,
        lease_seconds: float = DEFAULTS.lease_seconds,
        retry_base_seconds: float = DEFAULTS.retry_base_seconds,
        retry_max_seconds: float = DEFAULTS.retry_max_seconds,
        retry_jitter: float = DEFAULTS.retry_jitter,
        heartbeat_seconds: float | None = DEFAULTS.heartbeat_seconds,
        operation_guard: OperationGuard | None = DEFAULTS.operation_guard,
        progress: Callable[[WorkerProgress], Any] | None = None,
        max_cases: int | None = DEFAULTS.max_cases,
        finalize_report: bool = DEFAULTS.finalize_report,
        until_finished: bool = DEFAULTS.until_finished,
        should_stop: Callable[[], bool] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        poll_seconds: float = DEFAULTS.poll_seconds,
        outage: OutagePolicy | None = DEFAULTS.outage,
        concurrency: int = DEFAULTS.concurrency,
        adaptive_concurrency: bool = DEFAULTS.adaptive_concurrency,
        batching: bool = DEFAULTS.batching,
        throttle_base_seconds: float = DEFAULTS.throttle_base_seconds,
        throttle_max_seconds: float = DEFAULTS.throttle_max_seconds,
    ) -> None:
        options = WorkerOptions(
            lease_seconds=lease_seconds,
            retry_base_seconds=retry_base_seconds,
            retry_max_seconds=retry_max_seconds,
            retry_jitter=retry_jitter,
            heartbeat_seconds=heartbeat_seconds,
            operation_guard=operation_guard,
            outage=outage,
            poll_seconds=poll_seconds,
            concurrency=concurrency,
            adaptive_concurrency=adaptive_concurrency,
            batching=batching,
            throttle_base_seconds=throttle_base_seconds,
            throttle_max_seconds=throttle_max_seconds,
            max_cases=max_cases,
            finalize_report=finalize_report,
            until_finished=until_finished,
        )
        self._configure(
            campaigns,
            campaign_id,
            worker_id,
            evaluate,
            options,
            clock=clock,
            progress=progress,
            should_stop=should_stop,
            sleep=sleep,
        )

    @classmethod
    def from_options(
        cls,
        campaigns: CampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: Evaluate,
        options: WorkerOptions,
        *,
        clock: Clock = time.time,
        progress: Callable[[WorkerProgress], Any] | None = None,
        should_stop: Callable[[], bool] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> Self:
        """A worker with settings already checked (the keyword arguments, as one value)."""
        worker = cls.__new__(cls)
        worker._configure(
            campaigns,
            campaign_id,
            worker_id,
            evaluate,
            options,
            clock=clock,
            progress=progress,
            should_stop=should_stop,
            sleep=sleep,
        )
        return worker

    def _configure(
        self,
        campaigns: CampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: Evaluate,
        options: WorkerOptions,
        *,
        clock: Clock,
        progress: Callable[[WorkerProgress], Any] | None,
        should_stop: Callable[[], bool] | None,
        sleep: Callable[[float], Any],
    ) -> None:
        """Check the collaborators (the options checked themselves) and keep them."""
        if not isinstance(campaigns, CampaignService) or not callable(evaluate):
            raise blocked(dom.DEPENDENCY_INVALID)
        for value in (progress, should_stop):
            if value is not None and not callable(value):
                raise blocked(dom.DEPENDENCY_INVALID)
        if not callable(sleep) or not callable(clock) or not isinstance(options, WorkerOptions):
            raise blocked(dom.DEPENDENCY_INVALID)
        self.options = options
        self.outage = Outage(options.outage, sleep=self._runtime.sleep)
        self.concurrency = options.concurrency
        self.campaigns = campaigns
        self.campaign_id = campaign_id
        self.worker_id = dom.identifier(worker_id)
        self.evaluate = evaluate
        self.clock = clock
        self.progress = progress
        self.max_cases = options.max_cases
        self.finalize_report = options.finalize_report
        self.until_finished = options.until_finished
        self.should_stop = should_stop
        self.sleep = sleep
        self.poll_seconds = float(options.poll_seconds)
        # Idle waits listen for new work on PostgreSQL (see _idle_for).
        self._idle_wait = IdleWait(
            lambda: self.campaigns.context.db,
            lambda seconds: self.sleep(seconds),
            lambda: self.should_stop is not None and bool(self.should_stop()),
            self._listens,
        )

    def _driving(self) -> DriverContext:
        """What this worker's attempts share (``campaigns`` may be replaced before a run)."""
        return DriverContext(
            self.campaigns,
            self.campaign_id,
            self.worker_id,
            self.clock,
            self.options,
            self.outage,
            self._runtime,
        )

    def _status(self) -> CampaignStatus:
        return self.campaigns.status(self.campaign_id)

    #: How this worker locks, waits and keeps leases (threads; benchledger.aio: asyncio).
    _runtime: Runtime = THREADS

    def _stop_requested(self, tally: Tally) -> bool:
        return tally.stop or (self.should_stop is not None and bool(self.should_stop()))

    def _notify(
        self, tally: Tally, event: str, outcome: CaseOutcome | ReportOutcome | None
    ) -> None:
        if self.progress is not None:
            self.progress(tally.progress(event, outcome))

    def _next_case(self, tally: Tally) -> bool:
        """Run one due case, if any; whether there was one."""
        context = tally.driving
        if context is None:
            context = tally.driving = self._batched(self._driving(), tally)
        return self._case(tally, context, self.evaluate)

    @staticmethod
    def _batched(context: DriverContext, tally: Tally) -> DriverContext:
        """``context`` with the run's shared claim buffer and committer, if it has them."""
        if tally.buffer is None and tally.committer is None:
            return context
        return attrs.evolve(context, buffer=tally.buffer, committer=tally.committer)

    def _case(self, tally: Tally, context: DriverContext, evaluate: Evaluate) -> bool:
        """One attempt at the next due case of ``context``'s campaign, counted; whether
        there was one (a lost lease counts as one)."""
        started = dom.timestamp(self.clock())
        try:
            outcome = attempt_case(context, evaluate)
        except CampaignBlocked as error:
            if error.code != dom.LEASE_LOST:
                raise
            outcome = None
            with tally.lock:
                tally.lost += 1
        else:
            if outcome is None:
                return False
        throttled = outcome is not None and dom.is_throttle_code(outcome.error_code)
        if throttled:
            tally.lanes.throttled(started, dom.timestamp(self.clock()))
        elif outcome is not None and outcome.status == WorkStatus.SUCCEEDED:
            tally.lanes.succeeded()
        with tally.lock:
            if outcome is not None:
                tally.succeeded += outcome.status == WorkStatus.SUCCEEDED
                tally.throttled += throttled
                tally.retrying += outcome.status == WorkStatus.RETRY_WAIT and not throttled
                tally.failed += outcome.status == WorkStatus.FAILED
            tally.cases += 1
            self._notify(tally, "case", outcome)
        return True

    def _finalize(self, tally: Tally, context: DriverContext | None = None) -> ReportOutcome | None:
        """One report-finalization attempt (of ``context``'s campaign, by default this
        worker's); ``None`` if none was due or the lease was lost."""
        try:
            report = attempt_report(context or self._driving())
        except CampaignBlocked as error:
            if error.code not in REPORT_LOST:
                raise
            report = None
            with tally.lock:
                tally.lost_reports += 1
        with tally.lock:
            tally.report = report or tally.report
            self._notify(tally, "report", report)
        return report

    def _wait(self, next_due_at: float, looked_at: float) -> None:
        """Sleep until ``next_due_at``, at most ``poll_seconds``.

        Work that was already due when this worker last looked, and yet it
        got none (another worker was taking it), is looked at again after
        ``poll_seconds``, so the loop never spins.
        """
        if next_due_at <= looked_at:
            delay = self.poll_seconds
        else:
            delay = min(self.poll_seconds, next_due_at - dom.timestamp(self.clock()))
        if delay > 0:
            self._idle_for(delay)

    def _idle_for(self, delay: float) -> set[str]:
        """Wait ``delay`` seconds, or less when PostgreSQL notifies new work for this
        worker (:mod:`benchledger.workers.idle`); the campaigns notified."""
        return self._idle_wait.wait(delay, self._wakes_me)

    def _wakes_me(self, notified: set[str]) -> bool:
        return ANY_CAMPAIGN in notified or self.campaign_id in notified

    def _listens(self) -> bool:
        """Whether idle waits listen: thread lanes (asyncio lanes must not block) on the
        real clock (a test's clock keeps its own time); the database decides the rest."""
        return self._runtime is THREADS and self.clock is time.time

    def new_tally(self) -> Tally:
        """A run's counts, its idle lanes' pulse and its lane limit (K, adaptive or not),
        and with several lanes their shared claim buffer and committer."""
        lanes = LaneLimit(self.concurrency, adaptive=self.options.adaptive_concurrency)
        tally = Tally(work=self._runtime.pulse(), lanes=lanes)
        if self.concurrency > 1 and self.options.batching:
            tally.buffer = buffer = self._claim_buffer(lanes)
            tally.committer = Committer(
                self.campaigns,
                self._runtime,
                evaluating=None if buffer is None else buffer.pending_results,
            )
            max_cases = self.max_cases
            if tally.buffer is not None and max_cases is not None:
                tally.buffer.room = lambda: max(0, max_cases - tally.started)
            if buffer is not None:
                buffer.stopping = lambda: self._stop_requested(tally)
                tally.committer.refills = buffer
        return tally

    def _claim_buffer(self, lanes: LaneLimit) -> ClaimBuffer | None:
        """The lanes' claim buffer of this worker's one campaign."""
        return ClaimBuffer(
            self.campaigns,
            self.campaign_id,
            self.worker_id,
            float(self.options.lease_seconds),
            lanes,
            self._runtime,
        )

    def run(self) -> WorkerSummary:
        try:
            return self._run()
        finally:
            self._idle_wait.close()

    def _run(self) -> WorkerSummary:
        tally = self.new_tally()
        if self.concurrency == 1:
            stopped = self._lane(tally)
        else:
            with ThreadPoolExecutor(
                self.concurrency, thread_name_prefix="benchledger-case"
            ) as pool:
                running = [pool.submit(self._guarded_lane, tally) for _ in range(self.concurrency)]
                ends = [lane.result() for lane in running]
            stopped = self._lanes_ended(tally, ends)
            self.drain(tally)
        return self._finish(tally, stopped)

    def _guarded_lane(self, tally: Tally) -> bool | BaseException:
        """A lane of many: an error stops the other lanes (they finish their case)."""
        try:
            return self._lane(tally)
        except BaseException as error:
            tally.stop = True
            return error

    def _lanes_ended(self, tally: Tally, ends: list[bool | BaseException]) -> bool:
        """Whether the lanes were stopped; the first lane's error, raised, if one failed."""
        for end in ends:
            if isinstance(end, BaseException):
                raise end
        return any(ends)

    def _lane(self, tally: Tally) -> bool:
        """Claim, evaluate and record cases until done or stopped; whether it was stopped."""
        while not (stopped := self._stop_requested(tally)):
            if not tally.lanes.enter():
                # Held back (adaptive concurrency after throttling): wait for a lane.
                if tally.drained or tally.finished:
                    break
                if tally.work is not None:
                    tally.work.wait(min(self.poll_seconds, 0.1))
                continue
            try:
                if not self._turn(tally):
                    tally.drained = True  # lanes held back end with this one
                    break
            finally:
                tally.lanes.leave()
        if stopped:
            self.drain(tally)
        return stopped

    def drain(self, tally: Tally) -> None:
        """Run the cases still held in the claim buffer (leased in a batch, not started):
        held cases are finished, never left to expire. Claims nothing more."""
        if tally.buffer is None:
            return
        tally.buffer.closed = True
        while tally.buffer.held() and self._next_case(tally):
            pass

    def _turn(self, tally: Tally) -> bool:
        """One claim of a lane (or its idle wait when nothing is due); whether to go on."""
        if not tally.reserve(self.max_cases):
            return False
        looked_at = dom.timestamp(self.clock())
        if self._next_case(tally):
            if tally.work is not None and self.concurrency > 1:
                tally.work.pulse()  # work came due: idle lanes try for more
            return True
        tally.release()
        if not self.until_finished:
            return False
        if not tally.take_watch():
            # Another idle lane watches the campaign; wait for its word.
            self._idle(tally)
            return not tally.finished
        try:
            return self._watch(tally, looked_at)
        finally:
            tally.drop_watch()

    def _watch(self, tally: Tally, looked_at: float) -> bool:
        """The watching lane's look at the campaign: the report if due, else wait for work.

        Whether to go on (``False``: finished, the report is final or the
        campaign is blocked for good).
        """
        status = self.outage.call("status read", lambda: self.campaigns.status(self.campaign_id))
        if status.next_due_at is None:
            tally.finished = True
            if tally.work is not None:
                tally.work.pulse()
            return False
        now = dom.timestamp(self.clock())
        if (
            self.finalize_report
            and status.complete
            and status.next_due_at <= now
            and self._finalize(tally) is not None
        ):
            return True
        self._wait(status.next_due_at, looked_at)
        return True

    def _idle(self, tally: Tally) -> None:
        """Wait while another lane watches: until its pulse, it stops watching, or a stop."""
        if tally.work is None:
            return
        while tally.watching and not tally.finished and not self._stop_requested(tally):
            if tally.work.wait(self.poll_seconds):
                return

    def _finish(self, tally: Tally, stopped: bool) -> WorkerSummary:
        """After the lanes: the report attempt of a run that stopped when work ran out."""
        if (
            not stopped
            and not self.until_finished
            and self.finalize_report
            and self.outage.call(
                "report check",
                lambda: self.campaigns.report_finalization_required(self.campaign_id),
            )
        ):
            self._finalize(tally)
        return WorkerSummary(
            tally.cases,
            tally.succeeded,
            tally.retrying,
            tally.failed,
            tally.report,
            tally.lost,
            stopped,
            tally.lost_reports,
            tally.throttled,
        )
