"""Work one campaign with N worker processes and show progress (``campaign work``, the demo).

Each worker is a separate process (``spawn`` start method) that imports the
evaluator, opens its own :class:`~benchledger.Database` and runs a
:class:`~benchledger.workers.loop.Worker` with ``until_finished=True``: it
claims and evaluates until the campaign is finished or blocked, sleeping until
retries that are not due yet or leases other hosts hold fall due (at most
``poll_seconds`` at a time); when every item has succeeded, one of them
finalizes the report.

The workers' settings are one :class:`~benchledger.workers.options.WorkerOptions`,
checked when it is made, before any process starts. Its ``concurrency``
(``--concurrency K``) keeps up to K cases in flight in each worker process:
an ``async def`` evaluator runs on an event loop with
:class:`~benchledger.aio.AsyncWorker`, a plain ``def`` one on a thread pool
with ``Worker(concurrency=K)``; either way the process's connection pool is
sized for K cases and their heartbeats.

The parent process reads the campaign's status every ``refresh`` seconds and
shows it (a rich progress bar on a terminal, else a line now and then).

Stopping: the first SIGINT/SIGTERM (Ctrl-C) sets a shared stop event (the
workers' ``should_stop``, and the event their idle sleep waits on): every
worker finishes the case it holds (recording its result or its failure, so no
lease is left held), claims nothing more and exits; the parent waits for
them. A second signal terminates the workers at once; the cases they held
come back to the queue when their leases expire. Either way nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import multiprocessing
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any, TextIO

import attrs
import sqlalchemy as sa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Column

from benchledger.db import Database
from benchledger.domain.campaign import CAMPAIGN_PREFIX, ReportStatus, WorkStatus
from benchledger.domain.campaign_results import Outcome, outcome_parts
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.errors import LedgerError
from benchledger.faults import Outage, OutagePolicy
from benchledger.ports.campaign import Evaluate
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.workers.loop import Worker, WorkerProgress
from benchledger.workers.options import WorkerOptions

EVALUATOR_INVALID = "ledger.input.evaluator_invalid"
WORKER_FAILED = "ledger.worker.failed"


class PoolError(LedgerError):
    """A worker pool could not start or a worker stopped on an error."""


def is_async_evaluator(evaluate: object) -> bool:
    """Whether ``evaluate`` is an ``async def`` function (or an object with one as ``__call__``)."""
    return inspect.iscoroutinefunction(evaluate) or inspect.iscoroutinefunction(
        getattr(evaluate, "__call__", None)  # noqa: B004 - an async __call__, not callability
    )


def pool_size_for(concurrency: int) -> int | None:
    """The connection pool a worker process with ``concurrency`` cases in flight wants.

    A case holds a connection only while one of its short transactions runs
    (claim, renew, complete), so a few serve many: K/16 kept (at least 2) and as
    many more on demand; a case that finds none free waits its turn. More
    connections only add server backends (or, on SQLite with aiosqlite,
    threads) competing for the same CPU. ``None`` (the engine's default: 5
    kept, 10 more on demand) for one case at a time.
    """
    return None if concurrency == 1 else max(2, concurrency // 16)


@attrs.frozen
class PoolResult:
    """How a pool run ended."""

    status: CampaignStatus
    interrupted: bool
    cases: int
    elapsed: float
    errors: tuple[tuple[str, str], ...]

    @property
    def finished(self) -> bool:
        return (
            self.status.complete
            and self.status.report_finalization["status"] == ReportStatus.SUCCEEDED
        )


def load_evaluator(spec: str) -> Evaluate:
    """Import ``module:function`` (``ledger.input.evaluator_invalid`` if that fails)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise PoolError(EVALUATOR_INVALID, f"evaluator must be module:function, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise PoolError(
            EVALUATOR_INVALID, f"cannot import {module_name}: {type(error).__name__}: {error}"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise PoolError(EVALUATOR_INVALID, f"{spec} is not a callable in {module_name}")
    return target  # type: ignore[no-any-return]


def worker_outage(options: WorkerOptions) -> OutagePolicy:
    """The outage budget a worker (and the pool's parent) starts with: the options', else
    five minutes (``OutagePolicy()``), not a library constructor's few seconds."""
    return options.outage or OutagePolicy()


def default_worker_prefix() -> str:
    return f"{socket.gethostname() or 'host'}:{os.getpid()}"


Sign = Callable[[Mapping[str, Any], str], Mapping[str, Any]]
"""Applied to each result before it is recorded, with the campaign's policy sha256 (e.g.
``HmacAttestationSigner.sign``): the signature binds the result to its campaign."""


@attrs.frozen
class WorkerSetup:
    """What each worker process needs besides its options; pickled to it, so picklable.

    ``initializer`` runs first in the process (the command line's log settings);
    ``service_options`` are ``CampaignService`` keyword options (a result verifier,
    a report builder); ``sign`` passes every result through before it is recorded.
    """

    initializer: Callable[[], None] | None = None
    service_options: Mapping[str, Any] = attrs.field(factory=dict)
    sign: Sign | None = None


def _signed_result(value: Any, claim: Any, sign: Sign) -> Any:
    """The evaluator's result (or ``Outcome``'s) signed for the claim's campaign; anything
    else is left to the verifier to refuse."""
    result, cost_units = outcome_parts(value)
    if not isinstance(result, Mapping):
        return value
    policy_sha256 = str(claim.campaign_id).removeprefix(CAMPAIGN_PREFIX)
    signed = sign(result, policy_sha256)
    return Outcome(signed, cost_units) if isinstance(value, Outcome) else signed


def signed(evaluate: Any, sign: Sign | None) -> Any:
    """``evaluate`` whose results go through ``sign`` (bound to each claim's campaign);
    an ``async def`` evaluator stays one."""
    if sign is None:
        return evaluate
    if is_async_evaluator(evaluate):

        async def signed_async(claim: Any, heartbeat: Callable[[], None]) -> Any:
            return _signed_result(await evaluate(claim, heartbeat), claim, sign)

        return signed_async

    def signed_sync(claim: Any, heartbeat: Callable[[], None]) -> Any:
        return _signed_result(evaluate(claim, heartbeat), claim, sign)

    return signed_sync


# -- the worker process ------------------------------------------------------------------


def _worker_main(
    url: str,
    campaign_id: str,
    worker_id: str,
    evaluator: str,
    options: WorkerOptions,
    stop: Any,
    events: Any,
    setup: WorkerSetup | None = None,
) -> None:
    """One worker process: claim and evaluate until finished, blocked or told to stop."""
    # Ctrl-C reaches the whole process group: the parent decides, we finish our case.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    database: Database | None = None
    cases = 0

    lanes = options.concurrency

    def counted(progress: WorkerProgress) -> None:
        nonlocal cases, lanes
        cases = progress.cases
        if progress.lanes != lanes:  # adaptive concurrency moved: the display says so
            lanes = progress.lanes
            events.put(("lanes", worker_id, lanes))

    setup = setup or WorkerSetup()
    try:
        if setup.initializer is not None:
            setup.initializer()
        evaluate = signed(load_evaluator(evaluator), setup.sign)
        if is_async_evaluator(evaluate):
            asyncio.run(
                _async_worker(
                    url,
                    campaign_id,
                    worker_id,
                    evaluate,
                    options,
                    lambda: stop.is_set() or os.getppid() != parent,
                    counted,
                    setup.service_options,
                )
            )
            return
        database = Database(url, pool_size=pool_size_for(options.concurrency))
        # A worker started while the database recovers waits for it (its whole budget).
        campaigns = CampaignService(
            database, outage=worker_outage(options), **setup.service_options
        )
        Worker.from_options(
            campaigns,
            campaign_id,
            worker_id,
            evaluate,
            options,
            # Stop when asked, or when the parent is gone (nobody would ask any more).
            should_stop=lambda: stop.is_set() or os.getppid() != parent,
            sleep=stop.wait,
            progress=counted,
        ).run()
    except LedgerError as error:
        events.put(("error", worker_id, error.code, error.message))
    except Exception as error:  # a bug or an unusable database: report it, do not hang
        events.put(("error", worker_id, WORKER_FAILED, f"{type(error).__name__}: {error}"))
    finally:
        events.put(("exit", worker_id, cases))
        if database is not None:
            database.dispose()


async def _async_worker(
    url: str,
    campaign_id: str,
    worker_id: str,
    evaluate: Any,
    options: WorkerOptions,
    should_stop: Callable[[], bool],
    progress: Callable[[WorkerProgress], None],
    service_options: Mapping[str, Any],
) -> None:
    """The worker process's loop for an ``async def`` evaluator: AsyncWorker, K in flight."""
    from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker

    database = AsyncDatabase(url, pool_size=pool_size_for(options.concurrency))
    try:
        # AsyncWorker.run opens the service with the worker's whole outage budget.
        campaigns = AsyncCampaignService(database, **service_options)
        await AsyncWorker.from_options(
            campaigns,
            campaign_id,
            worker_id,
            evaluate,
            options,
            should_stop=should_stop,
            progress=progress,
        ).run()
    finally:
        await database.dispose()


# -- the parent: signals, progress, waiting -------------------------------------------------


class _Signals:
    """The first SIGINT/SIGTERM asks to stop; the second to stop at once."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: dict[int, Any] = {}

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Signals]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        try:
            yield self
        finally:
            for number, handler in self._previous.items():
                signal.signal(number, handler)


def _counts_line(status: CampaignStatus, lanes: str = "") -> str:
    counts = status.counts
    throttled = status.throttled
    line = (
        f"ok {counts[WorkStatus.SUCCEEDED]} fail {counts[WorkStatus.FAILED]} "
        f"retry {counts[WorkStatus.RETRY_WAIT] - throttled} lease {counts[WorkStatus.LEASED]}"
    )
    if throttled:
        line += f" throttled {throttled}"
    if lanes:
        line += f" lanes {lanes}"
    if status.waiting_on_group:
        line += " (waiting on its limit group)"
    return line


def _rate_eta(
    status: CampaignStatus, start_finished: int, elapsed: float, now: float | None = None
) -> tuple[str, str]:
    """Items per second so far, and the time left: at that rate, but never before the
    first waiting item falls due when nothing else is left to run."""
    finished = status.counts[WorkStatus.SUCCEEDED] + status.counts[WorkStatus.FAILED]
    rate = (finished - start_finished) / elapsed if elapsed > 0 else 0.0
    remaining = status.work_count - finished
    if remaining <= 0:
        return f"{rate:.1f}/s", "0:00"
    waiting = 0.0
    runnable = status.counts[WorkStatus.PENDING] + status.counts[WorkStatus.LEASED]
    if status.next_due_at is not None and not runnable:
        waiting = max(0.0, status.next_due_at - (time.time() if now is None else now))
    if rate <= 0 and not waiting:
        return f"{rate:.1f}/s", "-:--"
    seconds = int(max(remaining / rate if rate > 0 else 0.0, waiting))
    eta = f"{seconds // 60}:{seconds % 60:02d}"
    if waiting and status.throttled:
        eta += " (waiting on throttling)"
    return f"{rate:.1f}/s", eta


class _Display:
    """A rich progress bar on a terminal; otherwise a plain line every few seconds."""

    def __init__(self, label: str, stream: TextIO, live: bool, every: float = 5.0) -> None:
        self.label = label
        self.stream = stream
        self.live = live
        self.every = every
        self._last_line = 0.0
        self._progress: Progress | None = None
        self._task: Any = None
        #: Lanes that may claim, per worker process (adaptive concurrency), and in all.
        self.lanes: dict[str, int] = {}
        self.ceiling = 0
        self.workers = 1
        self.console = Console(file=stream, highlight=False)

    def __enter__(self) -> _Display:
        if self.live:
            # The text never shrinks (no ellipsis in a count); the bar takes what is left,
            # so the line fits 80 columns even at 100,000 items.
            self._progress = Progress(
                TextColumn("{task.description}", table_column=Column(no_wrap=True)),
                BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=4)),
                MofNCompleteColumn(table_column=Column(no_wrap=True)),
                TextColumn("{task.fields[counts]}", table_column=Column(no_wrap=True)),
                TextColumn(
                    "{task.fields[rate]} ETA {task.fields[eta]}",
                    table_column=Column(no_wrap=True),
                ),
                console=self.console,
                transient=False,
                expand=True,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=None, counts="", rate="", eta="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)

    def update(
        self, status: CampaignStatus, start_finished: int, elapsed: float, *, force: bool
    ) -> None:
        finished = status.counts[WorkStatus.SUCCEEDED] + status.counts[WorkStatus.FAILED]
        rate, eta = _rate_eta(status, start_finished, elapsed)
        if self._progress is not None:
            self._progress.update(
                self._task,
                total=status.work_count,
                completed=finished,
                counts=_counts_line(status, self._lanes()),
                rate=rate,
                eta=eta,
            )
            return
        now = time.monotonic()
        if force or now - self._last_line >= self.every:
            self._last_line = now
            self.note(
                f"{self.label}: {finished}/{status.work_count}  "
                f"{_counts_line(status, self._lanes())}  "
                f"{rate}  ETA {eta}"
            )

    def _lanes(self) -> str:
        """``12/32``: the lanes that may claim now, of all, once throttling moved them (a
        worker process that said nothing yet has all of its lanes)."""
        if not self.lanes or not self.ceiling:
            return ""
        silent = max(0, self.workers - len(self.lanes)) * (self.ceiling // self.workers)
        return f"{sum(self.lanes.values()) + silent}/{self.ceiling}"

    def note(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)


def run_pool(
    url: str,
    campaign_id: str,
    evaluator: str,
    *,
    workers: int,
    options: WorkerOptions | None = None,
    worker_prefix: str | None = None,
    progress: bool | None = None,
    stream: TextIO | None = None,
    refresh: float = 0.25,
    status_every: float = 1.0,
    label: str | None = None,
    on_status: Callable[[CampaignStatus], None] | None = None,
    setup: WorkerSetup | None = None,
) -> PoolResult:
    """Work ``campaign_id`` with ``workers`` processes until finished, blocked or stopped.

    ``progress`` ``None`` means a live bar when ``stream`` (default stderr) is
    a terminal. The parent wakes every ``refresh`` seconds (signals, worker
    exits, errors) but reads the campaign's status at most every
    ``status_every`` seconds, and once more when the workers are done: the
    display never competes with the workers for the database or the CPU.
    ``setup`` (picklable) is handed to every worker process (:class:`WorkerSetup`).
    Raises :class:`PoolError` (``evaluator_invalid``) before
    starting anything when the evaluator cannot be imported here, and the
    service's error when the campaign is unknown.
    """
    options = attrs.evolve(options or WorkerOptions(), until_finished=True)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
        raise PoolError("ledger.input.workers_invalid", "--workers must be from 1 to 256")
    load_evaluator(evaluator)
    stream = stream or sys.stderr
    live = stream.isatty() if progress is None else progress
    prefix = worker_prefix or default_worker_prefix()
    database = Database(url)
    try:
        # Started during a restart, the pool waits for the database as its workers do.
        outage = Outage(worker_outage(options))
        campaigns = CampaignService(database, outage=outage)
        # not_found before any process starts
        status = outage.call("status read", lambda: campaigns.status(campaign_id))
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        events = context.Queue()
        processes = [
            context.Process(
                target=_worker_main,
                args=(
                    database.url,
                    campaign_id,
                    f"{prefix}:{index}",
                    evaluator,
                    options,
                    stop,
                    events,
                    setup,
                ),
                name=f"benchledger-worker-{index}",
                daemon=False,
            )
            for index in range(workers)
        ]
        started = time.monotonic()
        start_finished = status.counts[WorkStatus.SUCCEEDED] + status.counts[WorkStatus.FAILED]
        errors: list[tuple[str, str]] = []
        failed: set[str] = set()
        cases = 0
        signals = _Signals()
        stopping = 0
        status_read_at = time.monotonic()  # the status above is fresh
        with signals.installed(), _Display(label or short_id(campaign_id), stream, live) as display:
            display.ceiling, display.workers = options.concurrency * workers, workers
            try:
                for process in processes:
                    with _sigint_ignored():
                        process.start()  # inherits SIG_IGN through exec: no KeyboardInterrupt
                while True:
                    alive = [process for process in processes if process.is_alive()]
                    cases += _collect(events, errors, display, failed, stop)
                    if signals.count > stopping:
                        stopping = signals.count
                        _stop(stop, alive, stopping, display)
                    if alive and time.monotonic() - status_read_at < status_every:
                        _sleep_unless_signalled(signals, stopping, refresh)
                        continue
                    status_read_at = time.monotonic()
                    try:
                        status = campaigns.status(campaign_id)
                    except (LedgerError, sa.exc.SQLAlchemyError) as error:
                        # The workers ride the outage out; so does the last read below.
                        display.note(f"cannot read the status now ({type(error).__name__})")
                        if not alive:
                            break
                    else:
                        if on_status is not None:
                            on_status(status)
                        display.update(
                            status, start_finished, time.monotonic() - started, force=not alive
                        )
                    if not alive:
                        break
                    _sleep_unless_signalled(signals, stopping, refresh)
            finally:
                # However the loop ended, never leave workers behind: they finish
                # their case and exit (a signal now stops them at once).
                stop.set()
                for process in processes:
                    while process.is_alive():
                        process.join(timeout=0.1)
                        if signals.count > stopping:
                            stopping = signals.count
                            _stop(stop, [p for p in processes if p.is_alive()], 2, display)
                cases += _collect(events, errors, None)
        events.close()
        events.join_thread()
        return PoolResult(
            status=outage.call("status read", lambda: campaigns.status(campaign_id)),
            interrupted=stopping > 0,
            cases=cases,
            elapsed=time.monotonic() - started,
            errors=tuple(errors),
        )
    finally:
        database.dispose()


def _collect(
    events: Any,
    errors: list[tuple[str, str]],
    display: _Display | None,
    failed: set[str] | None = None,
    done: Any = None,
) -> int:
    """Take the workers' events: errors are kept (and shown); returns cases reported done.

    ``failed`` collects the workers that reported an error. A worker that exits
    without one found the campaign finished (``until_finished``): ``done`` (the
    workers' stop event) is then set, so the others, asleep until more work is
    due, end now rather than at their next poll.
    """
    cases = 0
    failed = set() if failed is None else failed
    for event in _drain(events):
        if event[0] == "error":
            failed.add(event[1])
            errors.append((event[2], event[3]))
            if display is not None:
                display.note(f"worker {event[1]}: error: {event[2]}: {event[3]}")
        elif event[0] == "lanes":
            if display is not None:
                display.lanes[str(event[1])] = int(event[2])
        elif event[0] == "exit":
            cases += int(event[2])
            if done is not None and event[1] not in failed:
                done.set()
    return cases


def _stop(stop: Any, alive: list[Any], signals: int, display: _Display) -> None:
    """The first signal asks workers to stop after their case; a second terminates them."""
    if signals == 1:
        stop.set()
        display.note(
            f"stopping: {len(alive)} worker(s) finish their current case "
            "(Ctrl-C again to stop them at once)"
        )
        return
    for process in alive:
        process.terminate()
    display.note("stopping at once: held cases return when their leases expire")


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while a worker is spawned, so it starts with SIGINT ignored.

    An ignored signal stays ignored across ``exec`` (a handler does not), and
    Python installs its KeyboardInterrupt handler only when SIGINT is not
    ignored: a Ctrl-C while a worker is still importing cannot kill it with a
    traceback. The parent's own handler is back right after the spawn.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _drain(events: Any) -> Iterator[tuple[Any, ...]]:
    while True:
        try:
            yield events.get_nowait()
        except queue.Empty:
            return
        except (OSError, ValueError):
            return


def _sleep_unless_signalled(signals: _Signals, seen: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and signals.count == seen:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
