"""``benchledger campaign create | status | health | report | list | work`` on real databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchledger import Database
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.examples import example_policy, example_suite
from benchledger.services.campaigns import CampaignService

from .helpers import Invoke, json_of, ok, refused

EVALUATOR = "benchledger.examples.evaluator:evaluate"
FAST = ("--retry-base-seconds", "0.05", "--retry-max-seconds", "0.2", "--poll-seconds", "0.05")


def write_inputs(
    directory: Path, cases: int = 4, **changes: str
) -> tuple[Path, Path, CampaignPolicy, Suite]:
    suite = example_suite(cases)
    policy = example_policy(suite, **changes)
    policy_file = directory / "policy.json"
    suite_file = directory / "suite.json"
    policy_file.write_text(json.dumps(policy.as_payload()), encoding="utf-8")
    suite_file.write_text(json.dumps(suite.manifest()), encoding="utf-8")
    return policy_file, suite_file, policy, suite


def create(cli: Invoke, db: Database, policy_file: Path, suite_file: Path, *extra: str) -> str:
    result = ok(
        cli(
            "campaign",
            "create",
            "--policy",
            str(policy_file),
            "--suite",
            str(suite_file),
            *extra,
            url=db.url,
        )
    )
    return result.stdout.strip()


def test_create_prints_the_id_and_is_idempotent(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, policy, _ = write_inputs(tmp_path)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    assert campaign_id == policy.campaign_id
    assert create(cli, ledger_db, policy_file, suite_file) == campaign_id
    status = json_of(
        cli(
            "campaign",
            "create",
            "--policy",
            str(policy_file),
            "--suite",
            str(suite_file),
            "--json",
            url=ledger_db.url,
        )
    )
    assert status["campaign_id"] == campaign_id
    assert status["counts"]["pending"] == status["work_count"] == 4 * 4
    refused(
        cli(
            "campaign",
            "create",
            "--policy",
            str(policy_file),
            "--suite",
            str(suite_file),
            "--max-attempts",
            "5",
            url=ledger_db.url,
        ),
        "benchmark.campaign.attempts_mismatch",
    )


def test_create_refuses_bad_files_in_one_line(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    other_suite = tmp_path / "other-suite.json"
    other_suite.write_text(json.dumps(example_suite(3).manifest()), encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": ', encoding="utf-8")
    not_a_policy = tmp_path / "not-a-policy.json"
    not_a_policy.write_text('{"name": "x"}', encoding="utf-8")

    def attempt(policy: Path, suite: Path, *extra: str) -> object:
        return cli(
            "campaign", "create", "--policy", str(policy), "--suite", str(suite), *extra,
            url=ledger_db.url,
        )  # fmt: skip

    line = refused(attempt(tmp_path / "absent.json", suite_file), "ledger.input.file_missing")
    assert "absent.json" in line
    refused(attempt(policy_file, broken), "ledger.input.json_invalid")
    refused(attempt(not_a_policy, suite_file), "benchmark.campaign.policy_invalid")
    refused(attempt(policy_file, policy_file), "benchmark.campaign.suite_invalid")
    refused(attempt(policy_file, other_suite), "benchmark.campaign.suite_mismatch")
    refused(
        attempt(policy_file, suite_file, "--max-attempts", "0"),
        "benchmark.campaign.attempts_invalid",
    )
    refused(
        attempt(policy_file, suite_file, "--max-attempts", "x"), "ledger.cli.usage", exit_code=2
    )
    assert json_of(cli("campaign", "list", "--json", url=ledger_db.url)) == {
        "campaigns": [],
        "next_cursor": None,
    }


def test_reads_of_an_unknown_campaign_are_refused(cli: Invoke, ledger_db: Database) -> None:
    unknown = "benchmark-campaign-" + "0" * 64
    for command in ("status", "health", "report"):
        refused(
            cli("campaign", command, unknown, url=ledger_db.url), "benchmark.campaign.not_found"
        )
        refused(
            cli("campaign", command, unknown, "--json", url=ledger_db.url),
            "benchmark.campaign.not_found",
        )
    refused(
        cli("campaign", "status", "nonsense", url=ledger_db.url), "benchmark.campaign.not_found"
    )


def test_commands_refuse_a_schema_that_is_not_at_head(
    cli: Invoke, ledger_empty_db: Database, tmp_path: Path
) -> None:
    assert ledger_empty_db.current_revision() is None  # (creates an empty SQLite file)
    line = refused(cli("campaign", "list", url=ledger_empty_db.url), "ledger.schema.behind")
    assert "benchledger db upgrade" in line
    missing = tmp_path / "missing.db"
    refused(cli("campaign", "list", url=f"sqlite:///{missing}"), "ledger.database.missing")
    assert not missing.exists()


def test_status_health_report_and_list_before_any_work(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    service = CampaignService(ledger_db)
    assert json_of(cli("campaign", "status", campaign_id, "--json", url=ledger_db.url)) == (
        json.loads(json.dumps(service.status(campaign_id).as_payload()))
    )
    health = json_of(cli("campaign", "health", campaign_id, "--json", url=ledger_db.url))
    assert health["status"] == "healthy"
    assert health["schema"] == "blun.website-localization-benchmark-campaign-health.v1"
    text = ok(cli("campaign", "status", campaign_id, url=ledger_db.url)).stdout
    assert campaign_id in text and "pending" in text and "16" in text
    assert "healthy" in ok(cli("campaign", "health", campaign_id, url=ledger_db.url)).stdout
    refused(
        cli("campaign", "report", campaign_id, url=ledger_db.url),
        "benchmark.campaign.incomplete",
    )
    listing = json_of(cli("campaign", "list", "--json", url=ledger_db.url))
    assert [entry["campaign_id"] for entry in listing["campaigns"]] == [campaign_id]
    text = ok(cli("campaign", "list", url=ledger_db.url)).stdout
    assert campaign_id.removeprefix("benchmark-campaign-")[:12] in text  # short ids in tables
    assert campaign_id not in text


def test_list_pages_with_a_cursor_and_shows_unregistered_campaigns(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    ids = []
    for model in ("m-1", "m-2", "m-3"):
        policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=2, candidate_model_id=model)
        ids.append(create(cli, ledger_db, policy_file, suite_file))
    ordered = [summary.campaign_id for summary in CampaignService(ledger_db).list().campaigns]
    assert sorted(ordered) == sorted(ids)
    everything = json_of(cli("campaign", "list", "--json", url=ledger_db.url))
    assert [entry["campaign_id"] for entry in everything["campaigns"]] == ordered
    assert everything["next_cursor"] is None
    assert everything["campaigns"][0]["counts"]["pending"] == 8
    first = json_of(cli("campaign", "list", "--limit", "2", "--json", url=ledger_db.url))
    assert [entry["campaign_id"] for entry in first["campaigns"]] == ordered[:2]
    assert first["next_cursor"] == ordered[1]
    text = ok(cli("campaign", "list", "--limit", "2", url=ledger_db.url)).stdout
    assert f"(more: --cursor {ordered[1]})" in text
    rest = json_of(cli("campaign", "list", "--cursor", ordered[1], "--json", url=ledger_db.url))
    assert [entry["campaign_id"] for entry in rest["campaigns"]] == ordered[2:]
    refused(
        cli("campaign", "list", "--cursor", "nonsense", url=ledger_db.url),
        "benchmark.campaign.page_invalid",
    )
    refused(
        cli("campaign", "list", "--limit", "0", url=ledger_db.url),
        "benchmark.campaign.page_invalid",
    )
    # A campaign adopted from the legacy store (no stored policy yet) is listed with its code.
    with ledger_db.engine.begin() as connection:
        connection.exec_driver_sql("DELETE FROM benchmark_campaign_policies")
    listed = json_of(cli("campaign", "list", "--json", url=ledger_db.url))["campaigns"]
    assert [entry["error"] for entry in listed] == ["benchmark.campaign.policy_unregistered"] * 3
    assert [entry["work_count"] for entry in listed] == [8, 8, 8]
    assert "policy_unregistered" in ok(cli("campaign", "list", url=ledger_db.url)).stdout


@pytest.mark.slow
def test_work_finishes_a_campaign_and_finalizes_its_report(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=12)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    result = cli(
        "campaign", "work", campaign_id, "--workers", "2", "--evaluator", EVALUATOR, *FAST,
        url=ledger_db.url,
    )  # fmt: skip
    ok(result)
    assert "48/48 succeeded" in result.stderr
    status = json_of(cli("campaign", "status", campaign_id, "--json", url=ledger_db.url))
    assert status["complete"] and not status["blocked"]
    assert status["report_finalization"]["status"] == "succeeded"
    assert status["counts"]["succeeded"] == 48
    report = json_of(cli("campaign", "report", campaign_id, "--json", url=ledger_db.url))
    assert report == CampaignService(ledger_db).load_report(campaign_id)
    assert set(report["locales"]) == {"de-DE", "fr-FR", "ja-JP", "pt-BR"}
    table = ok(cli("campaign", "report", campaign_id, url=ledger_db.url)).stdout
    assert "ja-JP" in table and "overall" in table
    health = json_of(cli("campaign", "health", campaign_id, "--json", url=ledger_db.url))
    assert health["status"] == "healthy" and health["report_ready"]
    # Working a finished campaign again is a no-op that succeeds.
    again = ok(
        cli("campaign", "work", campaign_id, "--evaluator", EVALUATOR, *FAST, url=ledger_db.url)
    )
    assert "(0 attempts" in again.stderr


@pytest.mark.slow
def test_work_on_a_campaign_that_fails_for_good_exits_non_zero(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(
        tmp_path, cases=3, candidate_model_id="example-mt-lite"
    )
    campaign_id = create(cli, ledger_db, policy_file, suite_file, "--max-attempts", "2")
    result = cli(
        "campaign", "work", campaign_id, "--workers", "1", "--evaluator", EVALUATOR, *FAST,
        url=ledger_db.url,
    )  # fmt: skip
    line = refused(result, "benchmark.campaign.failed", after_progress=True)
    assert "campaign status" in line
    status = CampaignService(ledger_db).status(campaign_id)
    # Every item got its attempts: 3 ja-JP items and the long sources failed for good.
    assert status.blocked and status.counts["failed"] >= 3
    assert status.counts["failed"] + status.counts["succeeded"] == status.work_count
    assert "benchmark.campaign.dependency.example.locale_unsupported" in status.error_counts
    health = json_of(cli("campaign", "health", campaign_id, "--json", url=ledger_db.url))
    assert health["status"] == "blocked"
    assert "benchmark.campaign.failed" in health["reasons"]


def test_work_refuses_a_bad_evaluator_before_starting(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    for spec in ("nonsense", "no.such.module:evaluate", "benchledger.examples.evaluator:nope"):
        refused(
            cli("campaign", "work", campaign_id, "--evaluator", spec, url=ledger_db.url),
            "ledger.input.evaluator_invalid",
        )
    unknown = "benchmark-campaign-" + "1" * 64
    refused(
        cli("campaign", "work", unknown, "--evaluator", EVALUATOR, url=ledger_db.url),
        "benchmark.campaign.not_found",
    )
    refused(
        cli("campaign", "work", campaign_id, "--evaluator", EVALUATOR, "--workers", "0",
            url=ledger_db.url),
        "ledger.input.workers_invalid",
    )  # fmt: skip
    for option, value, code in (
        ("--lease-seconds", "0", "benchmark.campaign.duration_invalid"),
        ("--retry-base-seconds", "10", "benchmark.campaign.retry_invalid"),
        ("--retry-jitter", "1.5", "benchmark.campaign.retry_invalid"),
        ("--poll-seconds", "-1", "benchmark.campaign.duration_invalid"),
    ):
        result = cli(
            "campaign", "work", campaign_id, "--evaluator", EVALUATOR, option, value,
            "--retry-max-seconds", "5", url=ledger_db.url,
        )  # fmt: skip
        refused(result, code)
    refused(
        cli("campaign", "health", campaign_id, "--stale-after", "0", url=ledger_db.url),
        "benchmark.campaign.stale_threshold_invalid",
    )
    assert CampaignService(ledger_db).status(campaign_id).counts["pending"] == 16
