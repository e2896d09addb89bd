"""``benchledger campaign``'s operators' actions: register, retry, delete, cancel, resume,
limits.

Each is one ``CampaignService`` action (through ``CampaignActions``), refused with a
stable code where it does not apply; the commands are looked up lazily by
``benchledger campaign`` (``_COMMANDS`` in :mod:`benchledger.cli.campaign`).
"""

from __future__ import annotations

import click

from benchledger.cli.campaign import (
    actions,
    campaign_service,
    cap_options,
    parse_caps,
    read_policy_and_suite,
)
from benchledger.cli.numbers import INTEGER
from benchledger.cli.output import (
    CONFIRMATION_REQUIRED,
    console,
    emit_json,
    fail,
    json_option,
)
from benchledger.cli.settings import Settings, pass_settings
from benchledger.cli.views import print_controls


@click.command("register", short_help="Store a legacy campaign's policy and suite.")
@click.option("--policy", "policy_file", required=True, metavar="FILE", help="Policy JSON file.")
@click.option("--suite", "suite_file", required=True, metavar="FILE", help="Suite JSON file.")
@json_option
@pass_settings
def campaign_register(settings: Settings, policy_file: str, suite_file: str, as_json: bool) -> None:
    """Register the policy and suite of a campaign adopted from a legacy file; print its id.

    A legacy campaign has items but no stored policy and suite, so workers and
    reads refuse it (``policy_unregistered``) until it is registered. The files
    must be exactly the ones it was created from (every work id is checked).
    Registering again does nothing. ``db upgrade`` lists the campaigns that
    still need it.
    """
    policy, suite = read_policy_and_suite(policy_file, suite_file)
    with campaign_service(settings) as campaigns:
        campaign_id = campaigns.register(policy, suite)
        status = campaigns.status(campaign_id)
    if as_json:
        emit_json(status.as_payload())
    else:
        click.echo(campaign_id)


@click.command("retry", short_help="Give failed items (and report) more attempts.")
@click.argument("campaign_id")
@click.option(
    "--code",
    "codes",
    multiple=True,
    metavar="CODE",
    help="Only items whose last error is CODE (repeatable; the report too if it is).",
)
@click.option(
    "--work-id",
    "work_ids",
    multiple=True,
    metavar="WORK_ID",
    help="Only this item (repeatable; each must be failed).",
)
@click.option(
    "--attempts",
    type=INTEGER,
    default=None,
    help="Attempts each gets (1 to the campaign's max attempts) [default: all of them].",
)
@json_option
@pass_settings
def campaign_retry(
    settings: Settings,
    campaign_id: str,
    codes: tuple[str, ...],
    work_ids: tuple[str, ...],
    attempts: int | None,
    as_json: bool,
) -> None:
    """Return failed items to the queue with more attempts; re-arm a failed report.

    Without --code or --work-id every failed item is retried, and a failed
    report finalization too. Refused (nothing changes) when nothing selected
    has failed: benchmark.campaign.nothing_to_retry.
    """
    with campaign_service(settings) as campaigns:
        outcome = actions(campaigns).retry(
            actions(campaigns).resolve(campaign_id),
            attempts=attempts,
            codes=codes,
            work_ids=work_ids,
        )
    if as_json:
        emit_json(outcome.as_payload())
        return
    click.echo(
        f"{outcome.campaign_id}: {len(outcome.work_ids)} item(s) back in the queue with "
        f"{outcome.attempts} attempt(s) each"
        + ("; report finalization re-armed" if outcome.report_rearmed else "")
    )


@click.command("delete", short_help="Delete a campaign and all its rows.")
@click.argument("campaign_id")
@click.option("--yes", is_flag=True, help="Really delete (required).")
@click.option("--force", is_flag=True, help="Delete even while workers hold live leases.")
@json_option
@pass_settings
def campaign_delete(
    settings: Settings, campaign_id: str, yes: bool, force: bool, as_json: bool
) -> None:
    """Delete a campaign: its items, results, report, policy (and suite, unless another
    campaign uses it). There is no undo.

    Requires --yes. Refused while a worker holds a live lease
    (benchmark.campaign.leases_live) unless --force; a forced worker's next
    write is lease_lost.
    """
    with campaign_service(settings) as campaigns:
        campaign_id = actions(campaigns).resolve(campaign_id)
        if not yes:
            fail(
                CONFIRMATION_REQUIRED,
                f"deleting {campaign_id} cannot be undone: add --yes to delete it",
            )
        outcome = actions(campaigns).delete(campaign_id, force=force)
    if as_json:
        emit_json(outcome.as_payload())
        return
    rows = sum(outcome.rows.values())
    click.echo(
        f"deleted {outcome.campaign_id}: {rows} row(s)"
        + (f", overriding {outcome.live_leases} live lease(s)" if outcome.live_leases else "")
    )


@click.command("cancel", short_help="Stop handing out a campaign's work.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_cancel(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """Cancel a campaign: claims hand out none of its work and no report is finalized.

    Leases already handed out may still complete or fail; running `campaign
    work` pools go idle. `campaign resume` undoes it. Refused when it is
    already cancelled (benchmark.campaign.cancelled) or its report is final
    (benchmark.campaign.finished).
    """
    with campaign_service(settings) as campaigns:
        controls = actions(campaigns).cancel(actions(campaigns).resolve(campaign_id))
    if as_json:
        emit_json(controls.as_payload())
    else:
        click.echo(
            f"cancelled {controls.campaign_id}; {controls.live_leases} lease(s) still live "
            "may finish"
        )


@click.command("resume", short_help="Hand out a cancelled campaign's work again.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_resume(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """Undo `campaign cancel` (refused with benchmark.campaign.not_cancelled otherwise)."""
    with campaign_service(settings) as campaigns:
        controls = actions(campaigns).resume(actions(campaigns).resolve(campaign_id))
    if as_json:
        emit_json(controls.as_payload())
    else:
        click.echo(f"resumed {controls.campaign_id}: claims hand out its work again")


@click.command("limits", short_help="Show or change flow-control caps.")
@click.argument("campaign_id")
@cap_options
@json_option
@pass_settings
def campaign_limits(
    settings: Settings,
    campaign_id: str,
    max_concurrent_leases: str | None,
    max_claims_per_minute: str | None,
    as_json: bool,
) -> None:
    """Show a campaign's flow-control caps and flow, or change them.

    The claim enforces both caps atomically for any number of workers on any
    number of machines; 0 pauses the campaign, none removes a cap. Leases
    already handed out are not revoked by a lower cap.
    """
    caps = parse_caps(max_concurrent_leases, max_claims_per_minute)
    with campaign_service(settings) as campaigns:
        campaign_id = actions(campaigns).resolve(campaign_id)
        if caps:
            controls = actions(campaigns).set_limits(campaign_id, **caps)
        else:
            controls = actions(campaigns).controls(campaign_id)
    if as_json:
        emit_json(controls.as_payload())
    else:
        out = console()
        out.print(f"[bold]campaign[/bold] {controls.campaign_id}")
        print_controls(controls, out, always=True)
