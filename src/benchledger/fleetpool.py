"""Serve every open campaign with N fleet processes (``benchledger work --all``).

Each process (``spawn``) imports the evaluators it was started with, opens its
own :class:`~benchledger.Database` and runs a
:class:`~benchledger.workers.fleet.FleetWorker` with K lanes. The evaluators
are an allow-list: ``NAME=module:function`` (or ``module:function``, its own
name) given on the command line; a campaign is served only when the name it
stored at create is one of them. Nothing stored in the database is imported.

The parent reads the open campaigns now and then and prints one line (and,
at the end, one line per campaign it saw). Stopping is ``campaign work``'s:
the first SIGINT/SIGTERM lets every process finish the cases it holds and
exit; a second terminates them (their leases come back when they expire).
Without ``forever`` the processes exit once no campaign they serve has work
left; with it, they wait for new campaigns until stopped.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import attrs

from benchledger.db import Database
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.errors import LedgerError
from benchledger.faults import Outage
from benchledger.ports.campaign import Evaluate
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.workers.fleet import FleetWorker
from benchledger.workers.loop import WorkerProgress
from benchledger.workers.options import WorkerOptions
from benchledger.workpool import (
    EVALUATOR_INVALID,
    WORKER_FAILED,
    PoolError,
    Sign,
    WorkerSetup,
    _collect,
    _drain,
    _sigint_ignored,
    _Signals,
    _sleep_unless_signalled,
    default_worker_prefix,
    is_async_evaluator,
    load_evaluator,
    pool_size_for,
    signed,
    worker_outage,
)


def parse_evaluators(specs: Sequence[str]) -> dict[str, str]:
    """``NAME=module:function`` or ``module:function`` (named by itself) -> {name: spec}."""
    named: dict[str, str] = {}
    for spec in specs:
        name, _, target = spec.partition("=") if "=" in spec else (spec, "", spec)
        if not name or not target or name in named:
            raise PoolError(EVALUATOR_INVALID, f"--evaluator {spec!r}: NAME=MODULE:FUNCTION")
        named[name] = target
    if not named:
        raise PoolError(EVALUATOR_INVALID, "give at least one --evaluator")
    return named


def _synchronous(evaluate: Any) -> Evaluate:
    """An ``async def`` evaluator run on a fleet lane's thread, one event loop a case."""
    if not is_async_evaluator(evaluate):
        return evaluate  # type: ignore[no-any-return]

    def run(claim: Any, heartbeat: Callable[[], None]) -> Any:
        async def beat() -> None:
            heartbeat()

        return asyncio.run(evaluate(claim, beat))

    return run


def load_evaluators(named: Mapping[str, str], sign: Sign | None = None) -> dict[str, Evaluate]:
    """Import each allowed evaluator (signing its results when ``sign`` is given)."""
    return {name: _synchronous(signed(load_evaluator(spec), sign)) for name, spec in named.items()}


def _fleet_main(
    url: str,
    worker_id: str,
    evaluators: dict[str, str],
    options: WorkerOptions,
    providers: tuple[str, ...],
    campaign_ids: tuple[str, ...],
    forever: bool,
    refresh_seconds: float,
    stop: Any,
    events: Any,
    setup: WorkerSetup | None = None,
) -> None:
    """One fleet process: serve the open campaigns until none is left or told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    database: Database | None = None
    cases = 0

    def counted(progress: WorkerProgress) -> None:
        nonlocal cases
        cases = progress.cases

    setup = setup or WorkerSetup()
    try:
        if setup.initializer is not None:
            setup.initializer()
        loaded = load_evaluators(evaluators, setup.sign)
        database = Database(url, pool_size=pool_size_for(options.concurrency))
        campaigns = CampaignService(
            database, outage=worker_outage(options), **setup.service_options
        )
        FleetWorker.from_fleet_options(
            campaigns,
            worker_id,
            loaded,
            options,
            providers=providers,
            campaign_ids=campaign_ids,
            forever=forever,
            refresh_seconds=refresh_seconds,
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


@attrs.frozen
class FleetResult:
    """How a fleet run ended: the campaigns it saw (their last status), cases run."""

    statuses: tuple[CampaignStatus, ...]
    interrupted: bool
    cases: int
    elapsed: float
    errors: tuple[tuple[str, str], ...]

    @property
    def blocked(self) -> tuple[str, ...]:
        return tuple(status.campaign_id for status in self.statuses if status.blocked)


def _line(statuses: Sequence[CampaignStatus]) -> str:
    total = sum(status.work_count for status in statuses)
    done = sum(status.counts[WorkStatus.SUCCEEDED] for status in statuses)
    failed = sum(status.counts[WorkStatus.FAILED] for status in statuses)
    throttled = sum(status.throttled for status in statuses)
    waiting = sum(status.waiting_on_group for status in statuses)
    parts = [f"fleet: {len(statuses)} campaign(s), {done}/{total} done"]
    if failed:
        parts.append(f"{failed} failed")
    if throttled:
        parts.append(f"{throttled} waiting on throttling")
    if waiting:
        parts.append(f"{waiting} waiting on their limit group")
    return ", ".join(parts)


def run_fleet(
    url: str,
    evaluators: Sequence[str],
    *,
    workers: int,
    options: WorkerOptions | None = None,
    providers: Sequence[str] = (),
    campaign_ids: Sequence[str] = (),
    forever: bool = False,
    refresh_seconds: float = 2.0,
    worker_prefix: str | None = None,
    stream: TextIO | None = None,
    status_every: float = 5.0,
    setup: WorkerSetup | None = None,
) -> FleetResult:
    """Serve the open campaigns with ``workers`` fleet processes (see the module)."""
    options = attrs.evolve(options or WorkerOptions(), until_finished=True)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
        raise PoolError("ledger.input.workers_invalid", "--workers must be from 1 to 256")
    named = parse_evaluators(evaluators)
    load_evaluators(named)  # evaluator_invalid before any process starts
    stream = stream or sys.stderr
    prefix = worker_prefix or default_worker_prefix()
    database = Database(url)
    seen: dict[str, CampaignStatus] = {}
    try:
        outage = Outage(worker_outage(options))
        campaigns = CampaignService(database, outage=outage)

        def look() -> list[CampaignStatus]:
            listed = campaigns.open_campaigns(providers=providers, campaign_ids=campaign_ids)
            for campaign in listed:
                if campaign.evaluator in named:
                    seen.setdefault(campaign.campaign_id, campaigns.status(campaign.campaign_id))
            for campaign_id in seen:
                seen[campaign_id] = campaigns.status(campaign_id)
            return list(seen.values())

        outage.call("campaign list", look)
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        events = context.Queue()
        processes = [
            context.Process(
                target=_fleet_main,
                args=(
                    database.url,
                    f"{prefix}:{index}",
                    named,
                    options,
                    tuple(providers),
                    tuple(campaign_ids),
                    forever,
                    refresh_seconds,
                    stop,
                    events,
                    setup,
                ),
                name=f"benchledger-fleet-{index}",
                daemon=False,
            )
            for index in range(workers)
        ]
        started = time.monotonic()
        errors: list[tuple[str, str]] = []
        cases = 0
        signals = _Signals()
        stopping = 0
        looked_at = time.monotonic()
        with signals.installed():
            try:
                for process in processes:
                    with _sigint_ignored():
                        process.start()
                while any(process.is_alive() for process in processes):
                    cases += _collect(events, errors, None)
                    if signals.count > stopping:
                        stopping = signals.count
                        _stop_fleet(stop, processes, stopping, stream)
                    if time.monotonic() - looked_at >= status_every:
                        looked_at = time.monotonic()
                        try:
                            print(_line(look()), file=stream, flush=True)
                        except LedgerError as error:
                            print(f"cannot read the campaigns now ({error.code})", file=stream)
                    _sleep_unless_signalled(signals, stopping, 0.25)
            finally:
                stop.set()
                for process in processes:
                    while process.is_alive():
                        process.join(timeout=0.1)
                        if signals.count > stopping:
                            stopping = signals.count
                            _stop_fleet(stop, processes, 2, stream)
                cases += _collect(events, errors, None)
                for event in _drain(events):
                    del event
        for code, message in errors:
            print(f"worker: error: {code}: {message}", file=stream)
        statuses = outage.call("campaign list", look)
        for status in statuses:
            state = status.report_finalization["status"]
            print(
                f"{short_id(status.campaign_id)}  {status.counts[WorkStatus.SUCCEEDED]}/"
                f"{status.work_count} succeeded, {status.counts[WorkStatus.FAILED]} failed, "
                f"report {state}",
                file=stream,
            )
        return FleetResult(
            statuses=tuple(statuses),
            interrupted=stopping > 0,
            cases=cases,
            elapsed=time.monotonic() - started,
            errors=tuple(errors),
        )
    finally:
        database.dispose()


def _stop_fleet(stop: Any, processes: list[Any], signals: int, stream: TextIO) -> None:
    alive = [process for process in processes if process.is_alive()]
    if signals == 1:
        stop.set()
        print(
            f"stopping: {len(alive)} fleet process(es) finish their current cases "
            "(Ctrl-C again to stop them at once)",
            file=stream,
            flush=True,
        )
        return
    for process in alive:
        process.terminate()
    print("stopping at once: held cases return when their leases expire", file=stream)
