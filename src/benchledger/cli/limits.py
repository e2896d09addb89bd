"""``benchledger limits``: caps shared by every campaign of a limit group.

A campaign belongs to one limit group (``campaign create --limit-group KEY``;
by default its policy's provider). ``limits set KEY`` caps the live leases,
claims per minute and reported cost units per minute of the whole group;
every claim of every campaign in it checks them, beside the campaign's own
caps (the tighter wins). ``limits list`` shows every group with caps, ``limits
show KEY`` its usage now, ``limits clear KEY`` drops its caps.
"""

from __future__ import annotations

from typing import Any

import click

from benchledger.cli.campaign import campaign_service
from benchledger.cli.group import LedgerGroup
from benchledger.cli.numbers import parse_int
from benchledger.cli.output import emit_json, json_option
from benchledger.cli.settings import Settings, pass_settings

_KEEP = "keep"
_CAPS = {
    "max_concurrent": "max_concurrent_leases",
    "per_minute": "max_claims_per_minute",
    "cost_per_minute": "max_cost_per_minute",
}


@click.group("limits", cls=LedgerGroup)
def limits() -> None:
    """Caps a limit group's campaigns share (live leases, claims and cost per minute)."""


def _cap(value: str, current: int | None) -> int | None:
    """A flag's value: ``none`` (no cap), an integer (0 pauses), or unchanged when absent."""
    if value == _KEEP:
        return current
    if value.lower() == "none":
        return None
    try:
        return parse_int(value)
    except ValueError:
        return -1  # refused by the service with limit_group_invalid


def _show(payload: dict[str, Any]) -> str:
    def cap(name: str) -> str:
        value = payload[name]
        return "none" if value is None else f"{value:,}"

    return (
        f"{payload['key']}: max concurrent {cap('max_concurrent_leases')}, "
        f"{cap('max_claims_per_minute')} claims/min, {cap('max_cost_per_minute')} cost/min"
    )


@limits.command("set", short_help="Set a group's caps.")
@click.argument("key")
@click.option("--max-concurrent", default=_KEEP, metavar="N|none", help="Live leases, in all.")
@click.option("--per-minute", default=_KEEP, metavar="N|none", help="Claims per minute, in all.")
@click.option(
    "--cost-per-minute",
    default=_KEEP,
    metavar="N|none",
    help="Cost units evaluators report (Outcome(cost_units=...)) per minute, in all.",
)
@json_option
@pass_settings
def limits_set(
    settings: Settings,
    key: str,
    max_concurrent: str,
    per_minute: str,
    cost_per_minute: str,
    as_json: bool,
) -> None:
    """Set KEY's caps: a number (0 pauses the group), or none; a cap not given stays."""
    with campaign_service(settings) as campaigns:
        current = {limits.key: limits for limits in campaigns.group_limits()}.get(key)
        given = {"max_concurrent": max_concurrent, "per_minute": per_minute}
        given["cost_per_minute"] = cost_per_minute
        caps = {
            _CAPS[flag]: _cap(value, None if current is None else getattr(current, _CAPS[flag]))
            for flag, value in given.items()
        }
        limits_set_ = campaigns.set_group_limits(key, **caps)
    if as_json:
        emit_json(limits_set_.as_payload())
    else:
        click.echo(_show(limits_set_.as_payload()))


@limits.command("list", short_help="Every group with caps.")
@json_option
@pass_settings
def limits_list(settings: Settings, as_json: bool) -> None:
    """Every limit group with caps, by key."""
    with campaign_service(settings) as campaigns:
        groups = campaigns.group_limits()
    if as_json:
        emit_json([group.as_payload() for group in groups])
        return
    for group in groups:
        click.echo(_show(group.as_payload()))
    if not groups:
        click.echo("no limit group has caps")


@limits.command("show", short_help="A group's caps and usage now.")
@click.argument("key")
@json_option
@pass_settings
def limits_show(settings: Settings, key: str, as_json: bool) -> None:
    """KEY's caps, its campaigns, its live leases now and the last minute's usage."""
    with campaign_service(settings) as campaigns:
        usage = campaigns.group_usage(key)
    payload = usage.as_payload()
    if as_json:
        emit_json(payload)
        return
    click.echo(_show(payload))
    click.echo(
        f"now: {usage.live_leases:,} live leases, {usage.claims_last_minute:,} claims and "
        f"{usage.cost_last_minute:,} cost units in the last minute"
        + (" (at a cap: its campaigns wait)" if usage.at_cap else "")
    )
    click.echo(f"campaigns: {len(usage.campaigns)}")
    for campaign_id in usage.campaigns:
        click.echo(f"  {campaign_id}")


@limits.command("clear", short_help="Drop a group's caps.")
@click.argument("key")
@pass_settings
def limits_clear(settings: Settings, key: str) -> None:
    """Drop KEY's caps (its campaigns stay in the group, uncapped)."""
    with campaign_service(settings) as campaigns:
        had = campaigns.clear_group_limits(key)
    click.echo(f"{key}: caps dropped" if had else f"{key}: had no caps")
