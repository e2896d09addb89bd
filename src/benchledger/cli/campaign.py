"""``benchledger campaign``: create, work, status, health, report, list."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from benchledger.cli.group import LedgerGroup
from benchledger.cli.output import (
    CLI_INTERRUPTED,
    EXIT_INTERRUPTED,
    CommandError,
    console,
    emit_json,
    fail,
    json_option,
    read_json_file,
)
from benchledger.cli.settings import Settings, pass_settings
from benchledger.cli.views import print_campaign_list, print_health, print_report, print_status

if TYPE_CHECKING:  # imported where a command needs them: importing the CLI stays cheap
    from rich.console import Console

    from benchledger.services.campaigns import CampaignService
    from benchledger.workpool import PoolResult


@click.group(cls=LedgerGroup, short_help="Benchmark campaigns.")
def campaign() -> None:
    """Benchmark campaigns: create, work, status, health, report, list."""


@contextlib.contextmanager
def _campaigns(settings: Settings) -> Iterator[CampaignService]:
    """The campaign service on the settings' database, disposed of afterwards."""
    from benchledger.services.campaigns import CampaignService

    database = settings.database()
    try:
        yield CampaignService(database)
    finally:
        database.dispose()


def _show(value: Any, as_json: bool, payload: Any, show: Callable[[Any, Console], None]) -> None:
    if as_json:
        emit_json(payload)
    else:
        show(value, console())


@campaign.command("create", short_help="Create a campaign; print its id.")
@click.option("--policy", "policy_file", required=True, metavar="FILE", help="Policy JSON file.")
@click.option("--suite", "suite_file", required=True, metavar="FILE", help="Suite JSON file.")
@click.option(
    "--max-attempts",
    type=int,
    default=3,
    show_default=True,
    help="Attempts per item (1-20), fixed for the campaign.",
)
@json_option
@pass_settings
def campaign_create(
    settings: Settings, policy_file: str, suite_file: str, max_attempts: int, as_json: bool
) -> None:
    """Create a campaign (idempotent) and print its id."""
    from benchledger.domain.campaign import CampaignPolicy, Suite

    policy = CampaignPolicy.from_payload(read_json_file(policy_file, "policy"))
    suite = Suite.from_manifest(read_json_file(suite_file, "suite"))
    with _campaigns(settings) as campaigns:
        campaign_id = campaigns.create(policy, suite, max_attempts=max_attempts)
        status = campaigns.status(campaign_id)
    if as_json:
        emit_json(status.as_payload())
    else:
        click.echo(campaign_id)


@campaign.command("status", short_help="Counts by status and error code.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_status(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """Counts by status and error code, completion, report finalization."""
    with _campaigns(settings) as campaigns:
        status = campaigns.status(campaign_id)
    _show(status, as_json, status.as_payload(), print_status)


@campaign.command("health", short_help="Healthy, degraded or blocked, and why.")
@click.argument("campaign_id")
@click.option(
    "--stale-after",
    type=float,
    default=3600.0,
    show_default=True,
    metavar="SECONDS",
    help="No progress for this long is 'stalled'.",
)
@json_option
@pass_settings
def campaign_health(
    settings: Settings, campaign_id: str, stale_after: float, as_json: bool
) -> None:
    """Healthy, degraded or blocked, with text-free reasons (never fails on bad state)."""
    from benchledger.domain import campaign as dom

    with _campaigns(settings) as campaigns:
        health = campaigns.health(campaign_id, stale_after_seconds=stale_after)
    for code in (dom.NOT_FOUND, dom.POLICY_UNREGISTERED):
        if health.reasons == (code,):
            raise CommandError(code, f"no usable campaign {campaign_id}")
    _show(health, as_json, health.as_payload(), print_health)


@campaign.command("report", short_help="The finalized report, per locale.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_report(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """The finalized report, verified against the results (per-locale table)."""
    with _campaigns(settings) as campaigns:
        report = campaigns.load_report(campaign_id)
    _show(report, as_json, report, print_report)


@campaign.command("list")
@click.option("--cursor", default=None, metavar="ID", help="Continue after this campaign id.")
@click.option(
    "--limit",
    type=int,
    default=None,
    help="At most this many campaigns (1-1000), then a cursor to continue [default: all].",
)
@json_option
@pass_settings
def campaign_list(settings: Settings, cursor: str | None, limit: int | None, as_json: bool) -> None:
    """Campaigns, oldest first, with their counts."""
    from benchledger.domain.campaign import DEFAULT_LIST_LIMIT
    from benchledger.errors import LedgerError

    listing: list[dict[str, Any]] = []
    with _campaigns(settings) as campaigns:
        while True:
            page = campaigns.list(
                cursor=cursor, limit=DEFAULT_LIST_LIMIT if limit is None else limit
            )
            for summary in page.campaigns:
                try:
                    listing.append(campaigns.status(summary.campaign_id).as_payload())
                except LedgerError as error:  # e.g. a legacy campaign without a stored policy
                    listing.append({**summary.as_payload(), "error": error.code})
            cursor = page.next_cursor
            if limit is not None or cursor is None:
                break
    if as_json:
        emit_json({"campaigns": listing, "next_cursor": cursor})
    else:
        print_campaign_list(listing, cursor, console())


@campaign.command("work", short_help="Work a campaign with N processes.")
@click.argument("campaign_id")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes.")
@click.option(
    "--evaluator",
    required=True,
    metavar="MODULE:FUNCTION",
    help="evaluate(claim, heartbeat) -> result, e.g. benchledger.examples.evaluator:evaluate.",
)
@click.option("--worker-id", "worker_prefix", default=None, help="Worker id prefix.")
@click.option("--lease-seconds", type=float, default=300.0, show_default=True)
@click.option("--retry-base-seconds", type=float, default=5.0, show_default=True)
@click.option("--retry-max-seconds", type=float, default=3600.0, show_default=True)
@click.option("--retry-jitter", type=float, default=0.0, show_default=True)
@click.option(
    "--poll-seconds",
    type=float,
    default=1.0,
    show_default=True,
    help="Longest wait between looks when no item is due (wakes sooner when one falls due).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bar (default: when stderr is a terminal).",
)
@pass_settings
def campaign_work(
    settings: Settings,
    campaign_id: str,
    workers: int,
    evaluator: str,
    worker_prefix: str | None,
    lease_seconds: float,
    retry_base_seconds: float,
    retry_max_seconds: float,
    retry_jitter: float,
    poll_seconds: float,
    progress: bool | None,
) -> None:
    """Work a campaign with N processes until it is finished, blocked or interrupted.

    Exit 0 when the report is finalized, 1 when the campaign is blocked (an
    item or the report failed for good), 130 when interrupted (Ctrl-C: workers
    finish their current case first; nothing is lost, run again to resume).
    """
    from benchledger.workpool import WorkOptions, run_pool

    database = settings.database()
    database.dispose()
    options = WorkOptions(
        lease_seconds=lease_seconds,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        retry_jitter=retry_jitter,
        poll_seconds=poll_seconds,
    )
    result = run_pool(
        database.url,
        campaign_id,
        evaluator,
        workers=workers,
        options=options,
        worker_prefix=worker_prefix,
        progress=progress,
    )
    finish_work(result)


def finish_work(result: PoolResult) -> None:
    """Print how a pool run ended and exit accordingly."""
    from benchledger.domain import campaign as dom

    status = result.status
    counts = status.counts
    click.echo(
        f"{status.campaign_id}: {counts['succeeded']}/{status.work_count} succeeded, "
        f"{counts['failed']} failed, {counts['retry_wait']} retrying, "
        f"{counts['leased']} leased; report {status.report_finalization['status']} "
        f"({result.cases} cases in {result.elapsed:.1f} s)",
        err=True,
    )
    if result.errors:
        code, message = result.errors[0]
        fail(code, message)
    if result.interrupted:
        fail(CLI_INTERRUPTED, "stopped; run `campaign work` again to resume", EXIT_INTERRUPTED)
    if status.blocked:
        failed = counts["failed"]
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
