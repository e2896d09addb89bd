"""``benchledger db``: schema upgrade, current revision, check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from benchledger.cli.group import LedgerGroup
from benchledger.cli.output import (
    EXIT_SCHEMA_AHEAD,
    EXIT_SCHEMA_BEHIND,
    emit_json,
    fail,
    json_option,
)
from benchledger.cli.settings import Settings, pass_settings
from benchledger.errors import SCHEMA_AHEAD, SCHEMA_BEHIND, LedgerError

if TYPE_CHECKING:
    from benchledger.db import Database


@click.group(cls=LedgerGroup, short_help="Schema: upgrade, current, check.")
def db() -> None:
    """Schema management: upgrade, current revision, check."""


def _display_url(database: Database) -> str:
    import sqlalchemy as sa

    return sa.make_url(database.url).render_as_string(hide_password=True)


def _schema_state(settings: Settings) -> dict[str, Any]:
    """Where the database's schema stands against this version's head (creates nothing)."""
    from benchledger.db import head_revision

    database = settings.database(create=True, check_schema=False)
    try:
        path = database.sqlite_path
        exists = path is None or path.exists()
        current = database.current_revision() if exists else None
        head = head_revision()
        if current is None:
            state = "behind"
        elif current == head:
            state = "current"
        else:
            try:
                database.require_current_schema()
                state = "current"
            except LedgerError as error:
                state = "ahead" if error.code == SCHEMA_AHEAD else "behind"
        return {"url": _display_url(database), "current": current, "head": head, "state": state}
    finally:
        database.dispose()


@db.command("upgrade")
@pass_settings
def db_upgrade(settings: Settings) -> None:
    """Create or upgrade the schema to head (adopting a legacy seed database)."""
    database = settings.database(create=True, check_schema=False)
    try:
        database.upgrade()
        click.echo(f"{_display_url(database)} at {database.current_revision()} (head)")
    finally:
        database.dispose()


@db.command("current")
@json_option
@pass_settings
def db_current(settings: Settings, as_json: bool) -> None:
    """Show the schema revision of the database and this version's head."""
    state = _schema_state(settings)
    if as_json:
        emit_json(state)
        return
    click.echo(
        f"{state['url']}: at {state['current'] or 'nothing (empty)'}, "
        f"head {state['head']} ({state['state']})"
    )


@db.command("check")
@json_option
@pass_settings
def db_check(settings: Settings, as_json: bool) -> None:
    """Exit 0 when the schema is at head; 3 when behind, 4 when ahead."""
    state = _schema_state(settings)
    if as_json:
        emit_json(state)
    if state["state"] == "behind":
        fail(
            SCHEMA_BEHIND,
            f"the schema is at {state['current'] or 'nothing'}, behind head {state['head']}: "
            "run `benchledger db upgrade`",
            EXIT_SCHEMA_BEHIND,
        )
    if state["state"] == "ahead":
        fail(
            SCHEMA_AHEAD,
            f"the schema is at {state['current']}, ahead of this benchledger's head "
            f"{state['head']}: upgrade benchledger",
            EXIT_SCHEMA_AHEAD,
        )
    if not as_json:
        click.echo(f"{state['url']}: at head {state['head']}")
