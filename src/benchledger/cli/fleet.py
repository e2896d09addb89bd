"""``benchledger work``: one fleet of worker processes for every open campaign.

The fleet serves every campaign that named an evaluator at create (``campaign
create --evaluator NAME``) and is neither cancelled nor finished, or only
those of ``--provider`` / ``--campaign``; campaigns created meanwhile are
picked up without a restart. ``--evaluator`` lists the evaluators this fleet
may run (``NAME=module:function``, or ``module:function`` named by itself):
the allow-list a campaign's stored name is looked up in, never imported from
the database. Stopping is ``campaign work``'s (Ctrl-C: the cases in flight
finish first; again: at once).
"""

from __future__ import annotations

from typing import Any

import click

from benchledger.cli.campaign_work import _worker_option_flags, importable_current_directory
from benchledger.cli.numbers import INTEGER, NUMBER
from benchledger.cli.output import CLI_INTERRUPTED, CLI_USAGE, EXIT_INTERRUPTED, fail
from benchledger.cli.settings import Settings, pass_settings
from benchledger.domain import campaign as dom
from benchledger.workers.options import WorkerOptions


@click.command("work", short_help="Serve every open campaign with one fleet.")
@click.option(
    "--all",
    "serve_all",
    is_flag=True,
    help="Serve every open campaign whose evaluator is given (else only --campaign ones).",
)
@click.option(
    "--campaign",
    "campaign_ids",
    multiple=True,
    metavar="ID",
    help="Serve this campaign (repeatable; any unique id prefix).",
)
@click.option(
    "--provider", "providers", multiple=True, metavar="P", help="Only this provider's (repeatable)."
)
@click.option(
    "--evaluator",
    "evaluators",
    multiple=True,
    required=True,
    metavar="[NAME=]MODULE:FUNCTION",
    help=(
        "An evaluator this fleet may run (repeatable): campaigns created with "
        "--evaluator NAME are served with it."
    ),
)
@click.option("--workers", type=INTEGER, default=1, show_default=True, help="Fleet processes.")
@click.option("--worker-id", "worker_prefix", default=None, help="Worker id prefix.")
@click.option(
    "--forever",
    is_flag=True,
    help="Keep waiting for new campaigns when none has work left (until Ctrl-C).",
)
@click.option(
    "--refresh-seconds",
    type=NUMBER,
    default=2.0,
    show_default=True,
    help="How often each process looks for new, finished or cancelled campaigns.",
)
@_worker_option_flags
@pass_settings
def work(
    settings: Settings,
    /,
    serve_all: bool,
    campaign_ids: tuple[str, ...],
    providers: tuple[str, ...],
    evaluators: tuple[str, ...],
    workers: int,
    worker_prefix: str | None,
    forever: bool,
    refresh_seconds: float,
    **worker_options: Any,
) -> None:
    """Serve every open campaign (--all) or some (--campaign) with one fleet.

    Fair: each lane takes the campaigns in turn, and a campaign held back by its
    caps or its limit group's yields to the others. Throttled cases go back to
    the queue without spending an attempt; lanes back off on throttling and
    recover (--concurrency is the ceiling). Exit 0 when every campaign served
    is finished, 1 when one is blocked, 130 when interrupted.
    """
    from benchledger.fleetpool import run_fleet
    from benchledger.services.campaigns import CampaignService
    from benchledger.workpool import WorkerSetup

    if not serve_all and not campaign_ids:
        fail(CLI_USAGE, "say which campaigns: --all, or --campaign ID (repeatable)")
    options = WorkerOptions(**worker_options)
    keys = settings.signing_keys()  # a bad key file: refused before anything starts
    service_options = settings.service_options()
    database = settings.database()
    try:
        campaigns = CampaignService(database, **service_options)
        resolved = tuple(campaigns.resolve(campaign_id) for campaign_id in campaign_ids)
    finally:
        database.dispose()
    importable_current_directory()
    result = run_fleet(
        database.url,
        evaluators,
        workers=workers,
        options=options,
        providers=providers,
        campaign_ids=resolved,
        forever=forever,
        refresh_seconds=refresh_seconds,
        worker_prefix=worker_prefix,
        setup=WorkerSetup(
            initializer=settings.logging,
            service_options=service_options,
            sign=None if keys is None else keys.signer().sign,
        ),
    )
    if result.errors:
        code, message = result.errors[0]
        fail(code, message)
    if result.interrupted:
        fail(CLI_INTERRUPTED, "stopped; run `work` again to resume", EXIT_INTERRUPTED)
    if result.blocked:
        fail(
            dom.REASON_FAILED,
            f"{len(result.blocked)} campaign(s) blocked: see `benchledger campaign status ID`",
        )
