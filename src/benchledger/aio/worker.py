"""AsyncWorker: many cases in flight in one process, with an ``async def`` evaluator.

The worker runs :class:`~benchledger.workers.loop.Worker`'s own loop (claim,
evaluate under a lease keeper, record; fault riding, lost leases, failure
codes, retries, the report) on the event loop through SQLAlchemy's greenlet
bridge: K lanes, one asyncio task each, and one heartbeat task per lease.
Nothing about the rules is written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, Self

from benchledger.aio._bridge import GREENLETS, run_sync, wait
from benchledger.aio.campaigns import AsyncCampaignService
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.faults import OutagePolicy
from benchledger.services.campaigns import CampaignService
from benchledger.workers.loop import Tally, Worker, WorkerProgress, WorkerSummary
from benchledger.workers.options import DEFAULTS, OperationGuard, WorkerOptions

Heartbeat = Callable[[], Awaitable[None]]
AsyncEvaluate = Callable[[ClaimedCase, Heartbeat], Awaitable[Mapping[str, Any]]]


class _LoopWorker(Worker):
    """Worker's loop, run in greenlets on the event loop (asyncio lock, sleep, heartbeat)."""

    _runtime = GREENLETS


#: The service an AsyncWorker's loop is built with until run() opens the real one:
#: Worker checks its type only, and nothing calls it before run() replaces it.
_UNOPENED: Final = CampaignService.__new__(CampaignService)


class AsyncWorker:
    """Keeps up to ``concurrency`` cases in flight with ``async def evaluate(claim, heartbeat)``.

    ``evaluate`` returns the result mapping; ``await heartbeat()`` renews the
    lease at once (it is also renewed in the background, every third of the
    lease, by the case's own heartbeat task). Everything else is
    :class:`~benchledger.workers.loop.Worker`'s, with the same keyword
    options (a :class:`~benchledger.workers.options.WorkerOptions`; or
    :meth:`from_options`): a case that raises is failed with its code and
    retried with backoff, a lost lease is counted (``lost``), database faults
    are ridden out within ``outage``, and when every item has succeeded the
    report is finalized.

    Stopping: :meth:`stop` (or ``should_stop`` saying true) lets the cases in
    flight finish and record their outcome, and claims nothing more;
    :meth:`cancel` cancels them at once (their leases come back when they
    expire, nothing is lost). With ``handle_signals=True`` (``run`` in the
    main thread), the first SIGINT or SIGTERM stops and the second cancels.

    ``run`` must be awaited on the event loop the service's database was
    used on; the evaluator should not block that loop (use
    ``Worker(concurrency=K)`` for a blocking ``def evaluate``).
    """

    def __init__(
        self,
        campaigns: AsyncCampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: AsyncEvaluate,
        *,
        concurrency: int = DEFAULTS.concurrency,
        adaptive_concurrency: bool = DEFAULTS.adaptive_concurrency,
        batching: bool = DEFAULTS.batching,
        throttle_base_seconds: float = DEFAULTS.throttle_base_seconds,
        throttle_max_seconds: float = DEFAULTS.throttle_max_seconds,
        clock: Callable[[], float] = time.time,
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
        poll_seconds: float = DEFAULTS.poll_seconds,
        outage: OutagePolicy | None = DEFAULTS.outage,
        handle_signals: bool = False,
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
            handle_signals=handle_signals,
        )

    @classmethod
    def from_options(
        cls,
        campaigns: AsyncCampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: AsyncEvaluate,
        options: WorkerOptions,
        *,
        clock: Callable[[], float] = time.time,
        progress: Callable[[WorkerProgress], Any] | None = None,
        should_stop: Callable[[], bool] | None = None,
        handle_signals: bool = False,
    ) -> Self:
        """An async worker with settings already checked (the keyword arguments, as one value)."""
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
            handle_signals=handle_signals,
        )
        return worker

    def _configure(
        self,
        campaigns: AsyncCampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: AsyncEvaluate,
        options: WorkerOptions,
        *,
        clock: Callable[[], float],
        progress: Callable[[WorkerProgress], Any] | None,
        should_stop: Callable[[], bool] | None,
        handle_signals: bool,
    ) -> None:
        if not isinstance(campaigns, AsyncCampaignService) or not callable(evaluate):
            raise blocked(dom.DEPENDENCY_INVALID)
        if should_stop is not None and not callable(should_stop):
            raise blocked(dom.DEPENDENCY_INVALID)
        if not isinstance(handle_signals, bool):
            raise blocked(dom.WORKER_SETTING_INVALID)
        self.campaigns = campaigns
        self.campaign_id = campaign_id
        self.worker_id = worker_id
        self.evaluate = evaluate
        self.concurrency = options.concurrency
        self.handle_signals = handle_signals
        self._should_stop = should_stop
        # Worker checks the collaborators now, with its codes; the service it will
        # use is opened by run() (its schema check reads the database).
        self._worker = _LoopWorker.from_options(
            _UNOPENED,
            campaign_id,
            worker_id,
            self._evaluate,
            options,
            clock=clock,
            progress=progress,
            should_stop=self._stop_requested,
            sleep=self._sleep,
        )
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._lanes: list[asyncio.Task[bool | BaseException]] = []
        self._tally: Tally | None = None
        self._cancelled = False
        self.signals = 0  # SIGINT/SIGTERM received while running (handle_signals)

    # -- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the cases in flight, claim nothing more (idempotent)."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        if self._tally is not None and self._tally.work is not None:
            self._tally.work.pulse()  # idle lanes notice at once

    def cancel(self) -> None:
        """Cancel the cases in flight now; their leases come back when they expire."""
        self.stop()
        self._cancelled = True
        for lane in self._lanes:
            lane.cancel()

    def _stop_requested(self) -> bool:
        return self._stopping or (self._should_stop is not None and bool(self._should_stop()))

    def _signal(self) -> None:
        self.signals += 1
        if self.signals == 1:
            self.stop()
        else:
            self.cancel()

    @contextlib.contextmanager
    def _signals_installed(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        if not self.handle_signals:
            yield
            return
        numbers = (signal.SIGINT, signal.SIGTERM)
        for number in numbers:
            loop.add_signal_handler(number, self._signal)
        try:
            yield
        finally:
            for number in numbers:
                loop.remove_signal_handler(number)

    # -- the lanes -----------------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        """An idle lane's wait (in its greenlet): until due, or until asked to stop."""
        wake = self._wake
        if wake is None or wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            wait(asyncio.wait_for(wake.wait(), seconds))

    def _evaluate(self, claim: ClaimedCase, heartbeat: Callable[[], None]) -> Any:
        """The sync evaluator the driver calls (in its greenlet): awaits the async one."""

        async def beat() -> None:
            await run_sync(heartbeat)

        outcome = self.evaluate(claim, beat)
        return wait(outcome) if inspect.isawaitable(outcome) else outcome

    async def run(self) -> WorkerSummary:
        """Work until no case is due (or the campaign is finished: ``until_finished``)."""
        worker = self._worker
        # A worker started during a restart waits for the database with its whole
        # outage budget (the service's own default is a few seconds).
        service = worker.campaigns = await self.campaigns.ready(outage=worker.outage)
        # The campaign's plan (policy and suite, verified), read once before the lanes
        # start: K lanes that all found it missing would each read and verify it at
        # once (measured: 64 lanes, a 200-case suite, ~0.6 s of the event loop's time).
        # The same read and error codes as every claim's.
        await run_sync(worker.outage.call, "policy read", lambda: service.policy(self.campaign_id))
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if self._stopping:
            self._wake.set()
        tally = self._tally = worker.new_tally()  # the greenlets' pulse, K lanes
        with self._signals_installed(loop):
            self._lanes = [
                loop.create_task(run_sync(worker._guarded_lane, tally), name=f"lane-{index}")
                for index in range(self.concurrency)
            ]
            if self._cancelled:
                self.cancel()
            ends: list[bool | BaseException] = []
            for lane in self._lanes:
                try:
                    ends.append(await asyncio.shield(lane))
                except asyncio.CancelledError as error:
                    if not self._cancelled:
                        self.cancel()  # run() itself was cancelled: so are its cases
                        raise
                    ends.append(error)
            self._lanes = []
        if self._cancelled:
            # Cancelled cases are abandoned, not failed: their leases come back on expiry.
            ends = [True if isinstance(end, asyncio.CancelledError) else end for end in ends]
        stopped = worker._lanes_ended(tally, ends)
        if not self._cancelled:
            await run_sync(worker.drain, tally)
        return await run_sync(worker._finish, tally, stopped)
