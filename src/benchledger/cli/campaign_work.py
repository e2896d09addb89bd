"""``benchledger campaign work``: work a campaign with N worker processes until it is done.

The command reads its flags into one
:class:`~benchledger.workers.options.WorkerOptions` (whose defaults the flags
show and whose checks refuse a bad value, before any process starts) and hands
it to the worker pool (:mod:`benchledger.workpool`, imported when the command
runs, so the command line stays cheap to load).

Before it starts any process it checks the campaign (it exists, it is not
cancelled) and reads its status once: a campaign with nothing left to do
(finished, or blocked for good) is reported at once, with no process started
and nothing claimed. ``--metrics-port PORT`` has each worker process serve its
own Prometheus metrics (:mod:`benchledger.workers.metrics`), worker ``i`` on
``PORT + i``: the pool is handed :mod:`benchledger.workers.metered`'s evaluator,
which measures the user's.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import click

from benchledger.cli.campaign import actions, pass_score_option
from benchledger.cli.numbers import INTEGER, NUMBER
from benchledger.cli.output import CLI_INTERRUPTED, EXIT_INTERRUPTED, fail
from benchledger.cli.settings import Settings, pass_settings
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus
from benchledger.workers.options import DEFAULTS, WorkerOptions

if TYPE_CHECKING:
    from benchledger.domain.campaign_views import CampaignStatus
    from benchledger.workpool import PoolResult

#: The flags that set a worker option: (flag, WorkerOptions field, type, help).
_OPTION_FLAGS: Final[tuple[tuple[str, str, click.ParamType[Any], str | None], ...]] = (
    (
        "--concurrency",
        "concurrency",
        INTEGER,
        "Cases in flight per worker process: an async def evaluator runs them on an "
        "event loop, a def evaluator on a thread pool.",
    ),
    ("--lease-seconds", "lease_seconds", NUMBER, None),
    ("--retry-base-seconds", "retry_base_seconds", NUMBER, None),
    ("--retry-max-seconds", "retry_max_seconds", NUMBER, None),
    ("--retry-jitter", "retry_jitter", NUMBER, None),
    (
        "--poll-seconds",
        "poll_seconds",
        NUMBER,
        "Longest wait between looks when no item is due (wakes sooner when one falls due).",
    ),
)


def _worker_option_flags(function: Callable[..., Any]) -> Callable[..., Any]:
    """Add a flag for each worker option, its default the option's own."""
    for flag, field, kind, help_text in reversed(_OPTION_FLAGS):
        function = click.option(
            flag,
            field,
            type=kind,
            default=getattr(DEFAULTS, field),
            show_default=True,
            help=help_text,
        )(function)
    return function


@click.command("work", short_help="Work a campaign with N processes.")
@click.argument("campaign_id")
# Bounded by the pool (ledger.input.workers_invalid: 1 to 256), not by the type.
@click.option("--workers", type=INTEGER, default=1, show_default=True, help="Worker processes.")
@click.option(
    "--evaluator",
    required=True,
    metavar="MODULE:FUNCTION",
    help=(
        "evaluate(claim, heartbeat) -> result (or async def ... -> result), e.g. "
        "benchledger.examples.evaluator:evaluate; "
        "modules in the current directory are importable (as with python -m)."
    ),
)
@click.option("--worker-id", "worker_prefix", default=None, help="Worker id prefix.")
@_worker_option_flags
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bar (default: when stderr is a terminal).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    metavar="PORT",
    help=(
        "Each worker process serves its Prometheus metrics (cases, outcomes, durations, "
        "lanes in flight, outage retries) on a port of its own: worker process i on "
        "PORT+i, so --workers N takes PORT to PORT+N-1 (http://HOST:PORT/metrics)."
    ),
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    metavar="HOST",
    help="The address the worker metrics listen on (0.0.0.0: every interface).",
)
@pass_score_option(
    "The report counts a result without a passed flag as passed from this score (0-1) "
    "[default: 0.5]."
)
@pass_settings
def campaign_work(
    settings: Settings,
    /,
    campaign_id: str,
    workers: int,
    evaluator: str,
    worker_prefix: str | None,
    progress: bool | None,
    metrics_port: int | None,
    metrics_host: str,
    pass_score: float | None,
    **worker_options: Any,
) -> None:
    """Work a campaign with N processes until it is finished, blocked or interrupted.

    Exit 0 when the report is finalized, 1 when the campaign is blocked (an
    item or the report failed for good), 130 when interrupted (Ctrl-C: workers
    finish their current case first; nothing is lost, run again to resume).
    The current directory is importable, so ``--evaluator mybench:evaluate``
    finds ``./mybench.py`` (worker processes inherit it). ``--concurrency K``
    keeps up to K cases in flight in each of the P processes (P x K in all).
    A campaign with nothing left to do (finished, or blocked for good) is said
    so at once, without starting a process.
    """
    from benchledger.faults import Outage
    from benchledger.services.campaigns import CampaignService
    from benchledger.workpool import WorkerSetup, load_evaluator, run_pool, worker_outage

    started = time.monotonic()
    if metrics_port is not None:
        require_prometheus_client()
    options = WorkerOptions(**worker_options)
    keys = settings.signing_keys()  # a bad key file: refused before anything starts
    service_options = settings.service_options(pass_score=pass_score)
    # Started during a database restart, the command waits for it with the workers'
    # whole outage budget (five minutes by default), not a library constructor's few seconds.
    outage = Outage(worker_outage(options))
    database = settings.database(outage=outage)
    try:
        campaigns = CampaignService(database, outage=outage)
        campaign_id = outage.call(
            "campaign lookup", lambda: actions(campaigns).resolve(campaign_id)
        )
        if outage.call(
            "campaign lookup", lambda: actions(campaigns).controls(campaign_id)
        ).cancelled:
            fail(
                "benchmark.campaign.cancelled",
                "the campaign is cancelled: `benchledger campaign resume` it first",
            )
        status = outage.call("status read", lambda: campaigns.status(campaign_id))
    finally:
        database.dispose()
    if status.next_due_at is None:  # finished, or blocked for good: no work, no process
        report_end(status, cases=0, elapsed=time.monotonic() - started, nothing_to_do=True)
        return
    importable_current_directory()
    pool_evaluator = evaluator
    if metrics_port is not None:
        load_evaluator(evaluator)  # refused here, in the user's words, not in the wrapper
        check_metrics_ports(metrics_host, metrics_port, workers)
        pool_evaluator = metered_evaluator(evaluator, metrics_host, metrics_port)
    result = run_pool(
        database.url,
        campaign_id,
        pool_evaluator,
        workers=workers,
        options=options,
        worker_prefix=worker_prefix,
        progress=progress,
        setup=WorkerSetup(
            initializer=settings.logging,
            service_options=service_options,
            sign=None if keys is None else keys.signer().sign,
        ),
    )
    finish_work(result)


def require_prometheus_client() -> None:
    """Refuse ``--metrics-port`` without prometheus-client (the dashboard extra has it)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        fail(
            "ledger.dashboard.not_installed",
            "--metrics-port needs prometheus-client: pip install 'benchledger[dashboard]'",
        )


def check_metrics_ports(host: str, port: int, workers: int) -> None:
    """Refuse ports the worker processes could not serve on: beyond 65535, or taken."""
    if port + workers - 1 > 65535:
        raise click.BadParameter(
            f"{workers} worker processes need ports {port} to {port + workers - 1}",
            param_hint="--metrics-port",
        )
    for offset in range(workers):
        try:
            with socket.create_server((host, port + offset)):
                pass
        except OSError as error:
            raise click.BadParameter(
                f"worker process {offset} cannot listen on {host}:{port + offset} "
                f"({error.strerror or error})",
                param_hint="--metrics-port",
            ) from None


def metered_evaluator(evaluator: str, host: str, port: int) -> str:
    """The pool's evaluator that measures ``evaluator`` and serves each worker process's
    metrics; the worker processes inherit what it needs through the environment."""
    from benchledger.workers import metered

    os.environ[metered.EVALUATOR_ENV] = evaluator
    os.environ[metered.PORT_ENV] = str(port)
    os.environ[metered.HOST_ENV] = host
    return metered.EVALUATOR


def importable_current_directory() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m`` does.

    A console script's ``sys.path[0]`` is its own bin directory, so without
    this an evaluator module beside the user would need ``PYTHONPATH=.``.
    Spawned worker processes start with the parent's ``sys.path``.
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def finish_work(result: PoolResult) -> None:
    """Print how a pool run ended and exit accordingly."""
    if result.errors:
        report_line(result.status, result.cases, result.elapsed)
        code, message = result.errors[0]
        fail(code, message)
    if result.interrupted:
        report_line(result.status, result.cases, result.elapsed)
        fail(CLI_INTERRUPTED, "stopped; run `campaign work` again to resume", EXIT_INTERRUPTED)
    report_end(result.status, cases=result.cases, elapsed=result.elapsed)


def report_line(status: CampaignStatus, cases: int, elapsed: float, note: str = "") -> None:
    """The one line that says where the campaign stands after a run."""
    counts = status.counts
    click.echo(
        f"{status.campaign_id}: {counts[WorkStatus.SUCCEEDED]}/{status.work_count} succeeded, "
        f"{counts[WorkStatus.FAILED]} failed, {counts[WorkStatus.RETRY_WAIT]} retrying, "
        f"{counts[WorkStatus.LEASED]} leased; report {status.report_finalization['status']} "
        f"({cases} attempts finished in {elapsed:.1f} s){note}",
        err=True,
    )


def report_end(
    status: CampaignStatus, *, cases: int, elapsed: float, nothing_to_do: bool = False
) -> None:
    """Say how the campaign stands; exit 1 when it is blocked (0 otherwise)."""
    note = ""
    if nothing_to_do:
        note = "; blocked for good, nothing to work" if status.blocked else "; finished"
    report_line(status, cases, elapsed, note)
    counts = status.counts
    if status.blocked:
        failed = counts[WorkStatus.FAILED]
        if failed:
            fail(
                dom.REASON_FAILED,
                f"{failed} item(s) failed for good: see `benchledger campaign status "
                f"{status.campaign_id}`",
            )
        fail(
            dom.REASON_REPORT_FAILED,
            f"report finalization failed ({status.report_finalization['error_code']})",
        )
