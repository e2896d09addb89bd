"""The ``benchledger`` command line."""

from __future__ import annotations

import sys

import click

from benchledger.db import URL_ENV, Database, head_revision
from benchledger.errors import LedgerError


@click.group()
@click.option("--url", envvar=URL_ENV, default=None, help="Database URL.")
@click.pass_context
def main(context: click.Context, url: str | None) -> None:
    """A durable, auditable ledger of evaluation work."""
    context.obj = url


@main.group()
def db() -> None:
    """Schema management."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(url: str | None) -> None:
    """Upgrade the schema to head (adopting a legacy seed database)."""
    database = Database(url)
    try:
        database.upgrade()
    except LedgerError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(f"at {database.current_revision()}")


@main.command()
@click.pass_obj
def demo(url: str | None) -> None:
    """Create or upgrade a ledger and show its schema revision."""
    database = Database(url)
    database.upgrade()
    click.echo(
        f"ledger {database!r} at revision {database.current_revision()} (head {head_revision()})"
    )
