"""``campaign results | attempts | compare | report --provisional | rename | list --filters``
and one spelling per error code, on real databases."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchledger import Database, Worker
from benchledger.domain.campaign_codes import code_of_reason
from benchledger.domain.results import RESULT_COLUMNS
from benchledger.examples import example_policy, example_suite
from benchledger.examples.evaluator import evaluate
from benchledger.services.campaigns import CampaignService

from .helpers import Invoke, json_of, ok, refused

LITE = "example-mt-lite"  # fails ja-JP items and long sources for good
BAD_CODE = "benchmark.campaign.dependency.example.locale_unsupported"


def _worked(db: Database, model: str | None = None, name: str | None = None) -> str:
    suite = example_suite(6)
    policy = example_policy(suite, **({"candidate_model_id": model} if model else {}))
    service = CampaignService(db)
    cid = service.create(policy, suite, max_attempts=2, name=name)
    Worker(service, cid, "w-1", evaluate, retry_base_seconds=0).run()
    return cid


@pytest.fixture
def lite(ledger_db: Database) -> str:
    return _worked(ledger_db, LITE, name="lite run")


def test_results_stream_every_item_in_each_format(
    cli: Invoke, ledger_db: Database, lite: str, tmp_path: Path
) -> None:
    count = CampaignService(ledger_db).status(lite).work_count
    lines = ok(cli("campaign", "results", lite[-64:][:12], "--format", "jsonl", url=ledger_db.url))
    items = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(items) == count
    assert list(items[0]) == list(RESULT_COLUMNS)
    keys = [(item["locale"], item["case_key"]) for item in items]
    assert keys == sorted(keys)
    failed = [item for item in items if item["status"] == "failed"]
    assert failed and all(
        item["error_code"] == BAD_CODE for item in failed if item["locale"] == "ja-JP"
    )
    assert all(item["attempts_failed"] == 1 for item in failed)
    text = ok(cli("campaign", "results", lite, "--format", "csv", url=ledger_db.url)).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == RESULT_COLUMNS and len(rows) == count
    target = tmp_path / "results.parquet"
    ok(
        cli(
            "campaign", "results", lite, "--format", "parquet", "-o", str(target), url=ledger_db.url
        )
    )
    table = pq.read_table(target)
    assert table.num_rows == count and table.column_names == list(RESULT_COLUMNS)
    assert str(table.schema.field("score").type) == "double"
    assert str(table.schema.field("passed").type) == "bool"


def test_failed_items_are_listed_with_the_work_ids_retry_needs(
    cli: Invoke, ledger_db: Database, lite: str
) -> None:
    table = ok(cli("campaign", "results", lite, "--status", "failed", url=ledger_db.url)).stdout
    service = CampaignService(ledger_db)
    failed = [item for item in service.iter_results(lite, status="failed")]
    assert failed
    for item in failed:
        assert item.work_id in table and item.error_code in table
    work_id = failed[0].work_id
    ok(cli("campaign", "retry", lite, "--work-id", work_id, url=ledger_db.url))
    assert service.results(lite, status="failed").items[0].work_id != work_id


def test_attempts_list_the_history(cli: Invoke, ledger_db: Database, lite: str) -> None:
    page = json_of(
        cli("campaign", "attempts", lite, "--json", "--limit", "1000", url=ledger_db.url)
    )
    outcomes = {entry["outcome"] for entry in page["attempts"]}
    assert {"succeeded", "failed"} <= outcomes
    one = page["attempts"][0]["work_id"]
    mine = json_of(cli("campaign", "attempts", lite, "--work-id", one, "--json", url=ledger_db.url))
    assert mine["attempts"] and {a["work_id"] for a in mine["attempts"]} == {one}
    shown = ok(cli("campaign", "attempts", lite, "--work-id", one, url=ledger_db.url)).stdout
    assert one in shown


def test_compare_two_models_of_one_suite(cli: Invoke, ledger_db: Database, lite: str) -> None:
    full = _worked(ledger_db, name="full run")
    document = json_of(cli("campaign", "compare", lite, full, "--json", url=ledger_db.url))
    assert document["a"]["name"] == "lite run" and document["b"]["candidate"]["model_id"]
    assert document["paired"] > 0 and document["dropped"]["a_not_succeeded"] > 0
    assert document["overall"]["pairs"] == document["paired"]
    assert {entry["locale"] for entry in document["locales"]} >= {"de-DE"}
    text = ok(cli("campaign", "compare", lite, full, "--flips", url=ledger_db.url)).stdout
    assert "McNemar" in text and "lite run" in text and "flips" in text
    other = example_suite(3)
    odd = CampaignService(ledger_db).create(example_policy(other), other)
    refused(
        cli("campaign", "compare", lite, odd, url=ledger_db.url),
        "benchmark.campaign.compare.suite_differs",
    )


def test_a_blocked_campaign_has_a_provisional_report(
    cli: Invoke, ledger_db: Database, lite: str
) -> None:
    refused(cli("campaign", "report", lite, url=ledger_db.url), "benchmark.campaign.incomplete")
    text = ok(cli("campaign", "report", lite, "--provisional", url=ledger_db.url)).stdout
    assert "provisional" in text and "succeeded" in text
    document = json_of(
        cli("campaign", "report", lite, "--provisional", "--json", url=ledger_db.url)
    )
    assert document["provisional"] is True
    assert document["locales"]["ja-JP"]["succeeded"] == 0


def test_names_candidates_and_list_filters(cli: Invoke, ledger_db: Database, lite: str) -> None:
    listing = ok(cli("campaign", "list", url=ledger_db.url)).stdout
    assert "lite run" in listing and LITE in listing
    ok(cli("campaign", "rename", lite, "renamed", url=ledger_db.url))
    assert CampaignService(ledger_db).status(lite).name == "renamed"
    found = json_of(cli("campaign", "list", "--name", "RENAMED", "--json", url=ledger_db.url))
    assert [entry["campaign_id"] for entry in found["campaigns"]] == [lite]
    none = json_of(cli("campaign", "list", "--model", "nope", "--json", url=ledger_db.url))
    assert none["campaigns"] == []
    ok(cli("campaign", "rename", lite, "--clear", url=ledger_db.url))
    assert CampaignService(ledger_db).status(lite).name is None
    refused(cli("campaign", "rename", lite, url=ledger_db.url), "ledger.cli.usage", exit_code=2)
    refused(
        cli("campaign", "list", "--suite", "not-hex", url=ledger_db.url),
        "benchmark.campaign.filter_invalid",
    )


def test_a_code_has_one_spelling_on_every_surface(
    cli: Invoke, ledger_db: Database, lite: str
) -> None:
    status = json_of(cli("campaign", "status", lite, "--json", url=ledger_db.url))
    assert BAD_CODE in status["error_counts"]
    assert BAD_CODE in ok(cli("campaign", "status", lite, url=ledger_db.url)).stdout
    health = json_of(cli("campaign", "health", lite, "--json", url=ledger_db.url))
    codes = [code_of_reason(reason) for reason in health["reasons"]]
    assert BAD_CODE in codes
    assert not any(reason.count("benchmark.campaign.") > 1 for reason in health["reasons"])
    shown = ok(cli("campaign", "health", lite, url=ledger_db.url)).stdout
    assert BAD_CODE in shown.replace("\n", "")
    results = ok(cli("campaign", "results", lite, "--status", "failed", url=ledger_db.url))
    assert BAD_CODE in results.stdout
    attempts = json_of(cli("campaign", "attempts", lite, "--json", url=ledger_db.url))
    assert BAD_CODE in {entry["error_code"] for entry in attempts["attempts"]}
    # retry takes the full code or a unique suffix of it.
    before = status["counts"]["failed"]
    ok(cli("campaign", "retry", lite, "--code", "example.locale_unsupported", url=ledger_db.url))
    after = json_of(cli("campaign", "status", lite, "--json", url=ledger_db.url))
    assert after["counts"]["failed"] < before
    assert BAD_CODE not in {
        item.error_code for item in CampaignService(ledger_db).iter_results(lite, status="failed")
    }
