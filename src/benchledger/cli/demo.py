"""``benchledger demo``: the command; the demo itself is :mod:`benchledger.demo`."""

from __future__ import annotations

import click

from benchledger.cli.output import console
from benchledger.cli.settings import Settings, pass_settings


@click.command(short_help="Run both domains end to end.")
@click.option(
    "--cases",
    type=click.IntRange(1, 300),
    default=None,
    help="Use the first N cases of the example suite (default: all 300).",
)
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bars (default: when stderr is a terminal).",
)
@pass_settings
def demo(settings: Settings, cases: int | None, workers: int, progress: bool | None) -> None:
    """Run both domains end to end on one database (creates or upgrades it).

    Campaigns over the bundled example suite worked by N processes, then a
    study spending its budget and selecting a candidate. Safe to run again.
    """
    from benchledger.demo import run_demo

    database = settings.database(create=True, check_schema=False)
    database.dispose()
    run_demo(database.url, cases=cases, workers=workers, out=console(), progress=progress)
    click.echo(f"open the dashboard: {_serve_command(settings.url or database.url)}")


def _serve_command(url: str) -> str:
    """The command that serves the dashboard on ``url`` (a password is never printed)."""
    import os
    import sys

    import sqlalchemy as sa

    program = sys.argv[0] if os.path.basename(sys.argv[0]) == "benchledger" else "benchledger"
    shown = sa.make_url(url).render_as_string(hide_password=True)
    return f"{program} --url {shown} serve"
