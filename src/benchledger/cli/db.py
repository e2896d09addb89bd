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


def _legacy_version(database: Database) -> int | None:
    """The ``PRAGMA user_version`` of a legacy campaign-store file not adopted yet, else None."""
    from benchledger.legacy import LEGACY_DDL, sqlite_user_version

    if database.dialect_name != "sqlite":
        return None
    with database.engine.connect() as connection:
        version = sqlite_user_version(connection)
    return version if version in LEGACY_DDL else None


def _schema_state(settings: Settings) -> dict[str, Any]:
    """Where the database's schema stands against this version's head (creates nothing)."""
    from benchledger.db import head_revision

    database = settings.database(create=True, check_schema=False)
    try:
        path = database.sqlite_path
        exists = path is None or path.exists()
        current = database.current_revision() if exists else None
        head = head_revision()
        legacy = _legacy_version(database) if exists and current is None else None
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
        return {
            "url": _display_url(database),
            "current": current,
            "head": head,
            "state": state,
            "legacy_user_version": legacy,
        }
    finally:
        database.dispose()


def _where(state: dict[str, Any]) -> str:
    """What the database holds, in words: a revision, a legacy file, or nothing."""
    if state["current"] is not None:
        return str(state["current"])
    if state["legacy_user_version"] is not None:
        return (
            f"a legacy campaign store (PRAGMA user_version {state['legacy_user_version']}), "
            "not adopted yet: `benchledger db upgrade` adopts it"
        )
    return "nothing (empty)"


@db.command("upgrade")
@json_option
@pass_settings
def db_upgrade(settings: Settings, as_json: bool) -> None:
    """Create or upgrade the schema to head, adopting a legacy campaign-store file.

    Says what it did: created the schema, upgraded it, adopted a legacy file
    (and how many rows it kept), or nothing (already at head). Then lists the
    campaigns that still need `benchledger campaign register`. A database
    upgraded by a newer benchledger is refused (ledger.schema.ahead, exit 4).
    """
    before = _schema_state(settings)
    if before["state"] == "ahead":
        _refuse_ahead(before)
    database = settings.database(create=True, check_schema=False)
    try:
        adopted = _legacy_rows(database) if before["legacy_user_version"] else None
        database.upgrade()
        after = database.current_revision()
        unregistered = _unregistered(database)
    finally:
        database.dispose()
    if before["current"] == after:
        action = "none"
    elif adopted is not None:
        action = "adopted"
    elif before["current"] is None:
        action = "created"
    else:
        action = "upgraded"
    if as_json:
        emit_json(
            {
                "url": before["url"],
                "action": action,
                "from": before["current"],
                "to": after,
                "legacy_user_version": before["legacy_user_version"],
                "adopted_rows": adopted,
                "unregistered": list(unregistered),
            }
        )
        return
    url = before["url"]
    if action == "none":
        click.echo(f"{url}: already at head {after}, nothing to do")
    elif action == "created":
        click.echo(f"{url}: created the schema at {after} (head)")
    elif action == "upgraded":
        click.echo(f"{url}: upgraded from {before['current']} to {after} (head)")
    else:
        assert adopted is not None
        kept = ", ".join(f"{count} {name}" for name, count in adopted.items())
        click.echo(
            f"{url}: adopted a legacy campaign store (PRAGMA user_version "
            f"{before['legacy_user_version']}), keeping every row ({kept}), and upgraded it "
            f"to {after} (head)"
        )
    if unregistered:
        click.echo(
            f"{len(unregistered)} campaign(s) have no stored policy and suite; register each "
            "with `benchledger campaign register --policy FILE --suite FILE`:"
        )
        for campaign_id in unregistered:
            click.echo(f"  {campaign_id}")


def _legacy_rows(database: Database) -> dict[str, int]:
    """Rows a legacy file holds, by what they are (read before it is adopted)."""
    import sqlalchemy as sa

    names = {
        "benchmark_campaigns": "campaigns",
        "benchmark_campaign_work": "work items",
        "benchmark_campaign_reports": "reports",
    }
    counts: dict[str, int] = {}
    with database.engine.connect() as connection:
        tables = set(sa.inspect(connection).get_table_names())
        for table, name in names.items():
            if table in tables:
                counts[name] = int(
                    connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one()
                )
    return counts


def _unregistered(database: Database) -> tuple[str, ...]:
    from benchledger.services.campaigns import CampaignService
    from benchledger.services.campaigns.actions import CampaignActions

    return CampaignActions(CampaignService(database)).unregistered()


def _refuse_ahead(state: dict[str, Any]) -> None:
    fail(
        SCHEMA_AHEAD,
        f"the schema is at {state['current']}, ahead of this benchledger's head "
        f"{state['head']}: upgrade benchledger",
        EXIT_SCHEMA_AHEAD,
    )


@db.command("current")
@json_option
@pass_settings
def db_current(settings: Settings, as_json: bool) -> None:
    """Show the schema revision of the database and this version's head."""
    state = _schema_state(settings)
    if as_json:
        emit_json(state)
        return
    click.echo(f"{state['url']}: at {_where(state)}; head {state['head']} ({state['state']})")


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
        _refuse_ahead(state)
    if not as_json:
        click.echo(f"{state['url']}: at head {state['head']}")
