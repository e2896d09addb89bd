"""``benchledger db upgrade | current | check`` and the command line's error conventions."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from benchledger import Database
from benchledger.db import VERSION_TABLE, head_revision

from .helpers import Invoke, json_of, ok, refused


def test_upgrade_creates_a_sqlite_file_and_is_idempotent(cli: Invoke, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    first = ok(cli("db", "upgrade", url=url))
    assert head_revision() in first.stdout
    ok(cli("db", "upgrade", url=url))
    assert Database(url).current_revision() == head_revision()


def test_upgrade_takes_the_url_from_the_environment(cli: Invoke, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    ok(cli("db", "upgrade", env={"BENCHLEDGER_DATABASE_URL": url}))
    assert Database(url).current_revision() == head_revision()


def test_current_and_check_at_head(cli: Invoke, ledger_db: Database) -> None:
    state = json_of(cli("db", "current", "--json", url=ledger_db.url))
    assert state["current"] == state["head"] == head_revision()
    assert state["state"] == "current"
    assert "password" not in state["url"]
    text = ok(cli("db", "current", url=ledger_db.url)).stdout
    assert head_revision() in text
    assert "at head" in ok(cli("db", "check", url=ledger_db.url)).stdout
    assert json_of(cli("db", "check", "--json", url=ledger_db.url))["state"] == "current"


def test_check_says_behind_on_an_empty_database(cli: Invoke, ledger_empty_db: Database) -> None:
    result = cli("db", "check", url=ledger_empty_db.url)
    line = refused(result, "ledger.schema.behind", exit_code=3)
    assert "benchledger db upgrade" in line
    state = json_of(cli("db", "current", "--json", url=ledger_empty_db.url))
    assert state == {**state, "current": None, "state": "behind"}


def test_check_says_behind_on_an_older_revision(cli: Invoke, ledger_db: Database) -> None:
    ledger_db.downgrade("0003")
    result = cli("db", "check", "--json", url=ledger_db.url)
    assert result.exit_code == 3
    assert '"state": "behind"' in result.stdout
    refused(result, "ledger.schema.behind", exit_code=3)
    ok(cli("db", "upgrade", url=ledger_db.url))
    ok(cli("db", "check", url=ledger_db.url))


def test_check_says_ahead_on_an_unknown_revision(cli: Invoke, ledger_db: Database) -> None:
    with ledger_db.engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    line = refused(cli("db", "check", url=ledger_db.url), "ledger.schema.ahead", exit_code=4)
    assert "upgrade benchledger" in line
    assert json_of(cli("db", "current", "--json", url=ledger_db.url))["state"] == "ahead"


def test_check_does_not_create_a_missing_sqlite_file(cli: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    refused(cli("db", "check", url=f"sqlite:///{path}"), "ledger.schema.behind", exit_code=3)
    assert not path.exists()


def test_unusable_urls_are_one_line_refusals(cli: Invoke, tmp_path: Path) -> None:
    refused(cli("db", "check", url="nosuchdialect://x"), "ledger.database.url_invalid")
    refused(
        cli("db", "upgrade", url=f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}"),
        "ledger.database.unavailable",
    )
    refused(
        cli("db", "check", url="postgresql+psycopg://nobody@127.0.0.1:1/none"),
        "ledger.database.unavailable",
    )


def test_a_file_that_is_not_a_ledger_is_refused_and_left_alone(cli: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sa.create_engine(f"sqlite:///{path}").begin() as connection:
        connection.execute(sa.text("CREATE TABLE notes (id INTEGER PRIMARY KEY)"))
        connection.execute(sa.text("PRAGMA user_version = 7"))
    before = path.read_bytes()
    refused(
        cli("db", "upgrade", url=f"sqlite:///{path}"),
        "benchmark.campaign.schema_unsupported",
    )
    assert path.read_bytes() == before


def test_usage_errors_are_one_line_too(cli: Invoke) -> None:
    line = refused(cli("db", "nope"), "ledger.cli.usage", exit_code=2)
    assert "benchledger db --help" in line
    assert "Usage" in ok(cli("--help")).stdout
