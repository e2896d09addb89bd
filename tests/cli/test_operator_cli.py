"""What a new operator meets on the command line: one-line refusals instead of tracebacks,
no dead ends (legacy files, registering, evaluators beside you), readable output."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from rich.console import Console

from benchledger import Database
from benchledger.db import VERSION_TABLE, head_revision
from benchledger.repositories.campaigns.store import CAMPAIGNS

from .helpers import Invoke, json_of, ok, refused
from .test_campaign_commands import create, write_inputs

ROOT = Path(__file__).resolve().parents[2]
LEGACY = ROOT / "tests" / "data" / "legacy"
HEX = "benchmark-campaign-"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


# -- tracebacks where one line is promised ---------------------------------------------


def test_upgrade_of_a_database_from_a_newer_benchledger_is_one_line(
    cli: Invoke, ledger_db: Database
) -> None:
    with ledger_db.engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999_future'"))
    line = refused(cli("db", "upgrade", url=ledger_db.url), "ledger.schema.ahead", exit_code=4)
    assert "9999_future" in line and "upgrade benchledger" in line
    assert ledger_db.current_revision() == "9999_future"  # untouched


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql://u:p@localhost/db", "mysql"),
        ("oracle://u:p@localhost/db", "oracle"),
        ("postgresql+asyncpg://u:p@localhost/db", "postgresql+asyncpg"),
        ("sqlite+aiosqlite:///x.db", "aiosqlite"),
    ],
)
def test_unsupported_backends_are_one_line_naming_what_is_supported(
    cli: Invoke, url: str, named: str
) -> None:
    for command in (("db", "upgrade"), ("db", "current"), ("campaign", "list")):
        line = refused(cli(*command, url=url), "ledger.database.unsupported")
        assert named in line
        assert "sqlite:///" in line and "postgresql+psycopg://" in line
        assert "pip install" in line


def test_a_group_without_a_subcommand_prints_its_help(cli: Invoke) -> None:
    for group in ((), ("campaign",), ("db",), ("study",)):
        result = ok(cli(*group))
        assert result.stdout.startswith("Usage: benchledger")
        assert "Commands:" in result.stdout and not result.stderr


# -- dead ends: legacy files, registering --------------------------------------------------


def test_upgrade_says_what_it_did(cli: Invoke, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "new.db")
    assert "created the schema at" in ok(cli("db", "upgrade", url=url)).stdout
    assert "nothing to do" in ok(cli("db", "upgrade", url=url)).stdout
    again = json_of(cli("db", "upgrade", "--json", url=url))
    assert again["action"] == "none" and again["to"] == head_revision()
    Database(url).downgrade("0004")
    assert f"upgraded from 0004 to {head_revision()}" in ok(cli("db", "upgrade", url=url)).stdout


def test_a_legacy_file_is_named_adopted_with_its_rows_and_listed_for_registering(
    cli: Invoke, tmp_path: Path
) -> None:
    path = tmp_path / "legacy.sqlite"
    shutil.copyfile(LEGACY / "v3.sqlite", path)
    url = sqlite_url(path)
    manifest = json.loads((LEGACY / "manifest.json").read_text())["files"]["v3.sqlite"]
    ids = sorted(entry["campaign_id"] for entry in manifest["campaigns"])

    current = ok(cli("db", "current", url=url)).stdout
    assert "legacy campaign store (PRAGMA user_version 3), not adopted yet" in current
    assert "nothing (empty)" not in current
    assert json_of(cli("db", "current", "--json", url=url))["legacy_user_version"] == 3

    text = ok(cli("db", "upgrade", url=url)).stdout
    assert "adopted a legacy campaign store (PRAGMA user_version 3)" in text
    tables = manifest["tables"]
    assert f"{tables['benchmark_campaigns']} campaigns" in text
    assert f"{tables['benchmark_campaign_work']} work items" in text
    assert "2 campaign(s) have no stored policy and suite" in text
    assert "benchledger campaign register --policy FILE --suite FILE" in text
    assert all(campaign_id in text for campaign_id in ids)
    # Upgrading again lists them still, and says nothing else happened.
    again = json_of(cli("db", "upgrade", "--json", url=url))
    assert again["action"] == "none" and sorted(again["unregistered"]) == ids


def test_register_health_and_status_of_a_campaign_without_stored_policy(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    with ledger_db.engine.begin() as connection:  # as a legacy file adopts it
        connection.exec_driver_sql("DELETE FROM benchmark_campaign_policies")
        connection.exec_driver_sql("DELETE FROM benchmark_campaign_suites")
    refused(
        cli("campaign", "status", campaign_id, url=ledger_db.url),
        "benchmark.campaign.policy_unregistered",
    )
    # health reports what it finds and exits 0
    health = json_of(cli("campaign", "health", campaign_id, "--json", url=ledger_db.url))
    assert health["status"] == "blocked"
    assert health["reasons"] == ["benchmark.campaign.policy_unregistered"]
    assert "blocked" in ok(cli("campaign", "health", campaign_id, url=ledger_db.url)).stdout
    help_text = ok(cli("campaign", "health", "--help")).stdout
    assert "exits 0" in " ".join(help_text.split())

    registered = ok(
        cli(
            "campaign",
            "register",
            "--policy",
            str(policy_file),
            "--suite",
            str(suite_file),
            url=ledger_db.url,
        )
    )
    assert registered.stdout.strip() == campaign_id
    assert (
        json_of(cli("campaign", "status", campaign_id[:25], "--json", url=ledger_db.url))["counts"][
            "pending"
        ]
        == 16
    )
    assert "no stored policy" not in ok(cli("db", "upgrade", url=ledger_db.url)).stdout

    # Files that are not the campaign's: not_found (another policy), nothing changes.
    (tmp_path / "other").mkdir()
    other_policy, other_suite, _, _ = write_inputs(tmp_path / "other", candidate_model_id="x")
    refused(
        cli(
            "campaign",
            "register",
            "--policy",
            str(other_policy),
            "--suite",
            str(other_suite),
            url=ledger_db.url,
        ),
        "benchmark.campaign.not_found",
    )


def test_policy_invalid_names_the_field_and_the_rule(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, policy, _ = write_inputs(tmp_path)
    cases = {
        "required_locales": (["de-DE", "not a locale"], "required_locales"),
        "valid_until": ("tomorrow", "valid_until"),
        "candidate_model_id": (" padded ", "candidate_model_id"),
        "suite_sha256": ("abc", "suite_sha256"),
    }
    for field, (value, named) in cases.items():
        document = {**policy.as_payload(), field: value}
        policy_file.write_text(json.dumps(document), encoding="utf-8")
        line = refused(
            cli(
                "campaign",
                "create",
                "--policy",
                str(policy_file),
                "--suite",
                str(suite_file),
                url=ledger_db.url,
            ),
            "benchmark.campaign.policy_invalid",
        )
        assert f"field {named} " in line, line
    extra = {**policy.as_payload(), "colour": "blue"}
    policy_file.write_text(json.dumps(extra), encoding="utf-8")
    line = refused(
        cli(
            "campaign",
            "create",
            "--policy",
            str(policy_file),
            "--suite",
            str(suite_file),
            url=ledger_db.url,
        ),
        "benchmark.campaign.policy_invalid",
    )
    assert "field colour is not a policy field" in line
    assert no_campaigns(cli, ledger_db)


def no_campaigns(cli: Invoke, db: Database) -> bool:
    return json_of(cli("campaign", "list", "--json", url=db.url))["campaigns"] == []


# -- ids: prefixes, short ids, --quiet -----------------------------------------------------


def _add_bare_campaign(db: Database, campaign_id: str) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            sa.insert(CAMPAIGNS).values(
                campaign_id=campaign_id,
                policy_sha256=campaign_id.removeprefix(HEX),
                suite_sha256="0" * 64,
                work_count=1,
                created_at=1.0,
                updated_at=1.0,
            )
        )


def test_campaign_ids_are_taken_by_unique_prefix(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    digits = campaign_id.removeprefix(HEX)
    for prefix in (digits[:4], digits[:12], HEX + digits[:6], campaign_id):
        status = json_of(cli("campaign", "status", prefix, "--json", url=ledger_db.url))
        assert status["campaign_id"] == campaign_id
    for command in ("health", "report"):
        result = cli("campaign", command, digits[:8], url=ledger_db.url)
        assert "not_found" not in result.output
    refused(
        cli("campaign", "status", "ffff" if digits[:4] != "ffff" else "eeee", url=ledger_db.url),
        "benchmark.campaign.not_found",
    )
    refused(cli("campaign", "status", "abc", url=ledger_db.url), "benchmark.campaign.not_found")
    refused(cli("campaign", "status", "xyzw", url=ledger_db.url), "benchmark.campaign.not_found")
    # Two ids that share their first digits: a short prefix is ambiguous, a longer one is not.
    _add_bare_campaign(ledger_db, HEX + "abcd0" + "1" * 59)
    _add_bare_campaign(ledger_db, HEX + "abcd1" + "1" * 59)
    line = refused(
        cli("campaign", "health", "abcd", url=ledger_db.url), "benchmark.campaign.id_ambiguous"
    )
    assert "abcd01111111" in line and "abcd11111111" in line
    health = json_of(cli("campaign", "health", "abcd1", "--json", url=ledger_db.url))
    assert health["campaign_id"] == HEX + "abcd1" + "1" * 59
    quiet = ok(cli("campaign", "list", "--quiet", url=ledger_db.url)).stdout.split()
    assert sorted(quiet) == sorted(
        [campaign_id, HEX + "abcd0" + "1" * 59, HEX + "abcd1" + "1" * 59]
    )


@pytest.mark.parametrize("width", [80, 120])
def test_list_table_is_readable_at_80_and_120_columns(width: int) -> None:
    from benchledger.cli.views import print_campaign_list

    entry = {
        "campaign_id": HEX + "0123456789ab" + "c" * 52,
        "work_count": 123456,
        "counts": {"succeeded": 120000, "failed": 3456, "retry_wait": 12, "leased": 64},
        "report_finalization": {"status": "pending"},
    }
    out = io.StringIO()
    print_campaign_list([entry], None, Console(file=out, width=width, color_system=None))
    text = out.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    row = next(line for line in text.splitlines() if "0123456789ab" in line)
    for number in ("123456", "120000", "3456", "12", "64", "pending"):
        assert number in row


# -- evaluators beside you; logging ------------------------------------------------------


def test_an_evaluator_module_in_the_current_directory_is_importable(
    cli: Invoke, ledger_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=2)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    work = tmp_path / "bench"
    work.mkdir()
    (work / "mybench_local.py").write_text(
        "from benchledger.examples.evaluator import evaluate as _evaluate\n\n"
        "def evaluate(claim, heartbeat):\n"
        "    return _evaluate(claim, heartbeat)\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(work))])
    result = cli(
        "campaign",
        "work",
        campaign_id[:30],
        "--evaluator",
        "mybench_local:evaluate",
        "--no-progress",
        "--retry-base-seconds",
        "0.05",
        "--poll-seconds",
        "0.05",
        url=ledger_db.url,
    )
    ok(result)
    assert "attempts finished" in result.stderr
    status = json_of(cli("campaign", "status", campaign_id, "--json", url=ledger_db.url))
    assert status["complete"]


@pytest.fixture
def restored_loggers() -> Iterator[None]:
    """-v configures loggers of this process: put them back for the tests that follow."""
    names = ("benchledger", "alembic", "sqlalchemy.engine", "alembic.runtime.plugins")
    saved = {
        name: (
            list(logging.getLogger(name).handlers),
            logging.getLogger(name).level,
            logging.getLogger(name).propagate,
        )
        for name in names
    }
    yield
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.mark.usefixtures("restored_loggers")
def test_verbose_logs_alembic_and_the_alembic_command_applies_alembic_ini(
    cli: Invoke, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path / "logged.db")
    quiet = ok(cli("db", "upgrade", url=url))
    assert "Running upgrade" not in quiet.stderr
    url = sqlite_url(tmp_path / "logged2.db")
    loud = ok(cli("-v", "db", "upgrade", url=url))
    assert "Running upgrade  -> 0001" in loud.stderr
    assert "plugin" not in loud.stderr
    ok(cli("--log-level", "warning", "db", "current", url=url))
    alembic = subprocess.run(
        [
            str(Path(sys.executable).parent / "alembic"),
            "-x",
            f"url={sqlite_url(tmp_path / 'a.db')}",
            "upgrade",
            "head",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "INFO  [alembic.runtime.migration] Running upgrade" in alembic.stderr


# -- actions: retry, delete --------------------------------------------------------------


def test_retry_and_delete_on_the_command_line(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    from benchledger.services.campaigns import CampaignService

    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    short = campaign_id.removeprefix(HEX)[:8]
    refused(
        cli("campaign", "retry", short, url=ledger_db.url), "benchmark.campaign.nothing_to_retry"
    )
    service = CampaignService(ledger_db)
    failed = []
    for code in ("example.timeout", "example.broken"):
        claim = service.claim(campaign_id, "w-1")
        assert claim is not None
        service.fail(claim, code, retryable=False)
        failed.append(claim.work_id)
    one = json_of(
        cli("campaign", "retry", short, "--code", "example.timeout", "--json", url=ledger_db.url)
    )
    assert one == {
        "campaign_id": campaign_id,
        "retried": 1,
        "work_ids": [failed[0]],
        "report_rearmed": False,
        "attempts": 3,
    }
    text = ok(
        cli(
            "campaign", "retry", short, "--work-id", failed[1], "--attempts", "2", url=ledger_db.url
        )
    ).stdout
    assert "1 item(s) back in the queue with 2 attempt(s) each" in text
    refused(
        cli("campaign", "retry", short, "--attempts", "0", url=ledger_db.url),
        "benchmark.campaign.attempts_invalid",
    )

    claim = service.claim(campaign_id, "w-1")
    assert claim is not None
    line = refused(
        cli("campaign", "delete", short, url=ledger_db.url), "ledger.input.confirmation_required"
    )
    assert "--yes" in line
    refused(
        cli("campaign", "delete", short, "--yes", url=ledger_db.url),
        "benchmark.campaign.leases_live",
    )
    deleted = json_of(
        cli("campaign", "delete", short, "--yes", "--force", "--json", url=ledger_db.url)
    )
    assert deleted["campaign_id"] == campaign_id and deleted["live_leases"] == 1
    assert deleted["deleted_rows"]["benchmark_campaign_work"] == 16
    assert ok(cli("campaign", "list", "--quiet", url=ledger_db.url)).stdout == ""
    refused(cli("campaign", "status", short, url=ledger_db.url), "benchmark.campaign.not_found")


def test_cancel_resume_and_limits_on_the_command_line(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    campaign_id = create(
        cli,
        ledger_db,
        policy_file,
        suite_file,
        "--max-concurrent-leases",
        "2",
        "--max-claims-per-minute",
        "none",
    )
    short = campaign_id.removeprefix(HEX)[:6]
    shown = json_of(cli("campaign", "limits", short, "--json", url=ledger_db.url))
    assert shown["max_concurrent_leases"] == 2 and shown["max_claims_per_minute"] is None
    assert (
        "max concurrent leases  2 (0 live now)"
        in ok(cli("campaign", "status", short, url=ledger_db.url)).stdout
    )
    paused = json_of(
        cli(
            "campaign", "limits", short, "--max-concurrent-leases", "0", "--json", url=ledger_db.url
        )
    )
    assert paused["paused"] and paused["max_concurrent_leases"] == 0
    health = ok(cli("campaign", "health", short, url=ledger_db.url)).stdout
    assert "paused: a flow-control cap of 0 pauses the campaign" in health
    refused(
        cli("campaign", "limits", short, "--max-claims-per-minute", "many", url=ledger_db.url),
        "benchmark.campaign.limit_invalid",
    )
    refused(
        cli("campaign", "limits", short, "--max-claims-per-minute", "-3", url=ledger_db.url),
        "benchmark.campaign.limit_invalid",
    )
    ok(cli("campaign", "limits", short, "--max-concurrent-leases", "none", url=ledger_db.url))

    cancelled = json_of(cli("campaign", "cancel", short, "--json", url=ledger_db.url))
    assert cancelled["cancelled"] and cancelled["cancelled_at"] is not None
    refused(cli("campaign", "cancel", short, url=ledger_db.url), "benchmark.campaign.cancelled")
    health = json_of(cli("campaign", "health", short, "--json", url=ledger_db.url))
    assert "benchmark.campaign.cancelled" in health["reasons"]
    assert json_of(cli("campaign", "status", short, "--json", url=ledger_db.url))["cancelled"]
    status_text = ok(cli("campaign", "status", short, url=ledger_db.url)).stdout
    assert re.search(r"cancelled +yes, at ", status_text)
    refused(
        cli(
            "campaign",
            "work",
            short,
            "--evaluator",
            "benchledger.examples.evaluator:evaluate",
            url=ledger_db.url,
        ),
        "benchmark.campaign.cancelled",
    )
    assert "resumed" in ok(cli("campaign", "resume", short, url=ledger_db.url)).stdout
    refused(cli("campaign", "resume", short, url=ledger_db.url), "benchmark.campaign.not_cancelled")
    assert not json_of(cli("campaign", "limits", short, "--json", url=ledger_db.url))["cancelled"]
