"""``benchledger campaign archive``: the items moved to an export file (or dropped), the report
kept; refusals are one line and change nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger import Database, Worker
from benchledger.domain.canonical import canonical_json
from benchledger.examples import evaluator as example
from benchledger.examples import example_policy, example_suite
from benchledger.services.campaigns import CampaignService
from helpers import every_row

from .helpers import Invoke, json_of, ok, refused

ITEMS = 12  # 3 cases x the example policy's 4 locales


def campaign(db: Database, *, finish: bool = True) -> str:
    suite = example_suite(3)
    campaigns = CampaignService(db)
    campaign_id = campaigns.create(example_policy(suite), suite)
    if finish:
        Worker(campaigns, campaign_id, "w-1", example.evaluate, retry_base_seconds=0).run()
        assert campaigns.status(campaign_id).report_finalization["status"] == "succeeded"
    return campaign_id


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def stored_results(db: Database) -> dict[str, str]:
    with db.engine.connect() as connection:
        return dict(
            connection.execute(
                sa.text("SELECT work_id, result_json FROM benchmark_campaign_work")
            ).all()
        )


def test_archive_with_an_export_moves_every_item_to_the_file(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    cid = campaign(ledger_db)
    short = cid.removeprefix("benchmark-campaign-")[:12]
    url = ledger_db.url
    before = jsonl(ok(cli("campaign", "results", short, "--format", "jsonl", url=url)).stdout)
    report = json_of(cli("campaign", "report", short, "--json", url=url))
    texts = stored_results(ledger_db)
    export = tmp_path / "archive" / "items.jsonl"
    export.parent.mkdir()

    payload = json_of(
        cli("campaign", "archive", short, "--export", str(export), "--yes", "--json", url=url)
    )

    assert payload["campaign_id"] == cid and payload["items"] == ITEMS
    assert payload["exported"] == ITEMS and payload["export"] == str(export)
    assert payload["dropped_rows"]["benchmark_campaign_work"] == ITEMS
    assert payload["results_sha256"] == report["results_sha256"]
    assert set(payload["summary"]["locales"]) == set(report["locales"])
    # The file: campaign results' JSON Lines, each with its stored result and its digest.
    lines = jsonl(export.read_text(encoding="utf-8"))
    assert len(lines) == ITEMS
    for line, item in zip(lines, before, strict=True):
        assert {key: line[key] for key in item} == item
        assert canonical_json(line["result"]) == texts[line["work_id"]]
        digest = hashlib.sha256(texts[line["work_id"]].encode()).hexdigest()
        assert line["result_sha256"] == digest
    assert [path.name for path in export.parent.iterdir()] == ["items.jsonl"]  # no leftovers
    # The file alone vouches for the kept report: its digests, in order, are what it binds.
    digests = canonical_json([line["result_sha256"] for line in lines])
    assert hashlib.sha256(digests.encode()).hexdigest() == report["results_sha256"]

    # What still reads, and what refuses.
    assert json_of(cli("campaign", "report", short, "--json", url=url)) == report
    kept = json_of(cli("campaign", "report", short, "--provisional", "--json", url=url))
    assert kept["provisional"] is False and kept["locales"] == payload["summary"]["locales"]
    assert "kept summary" in ok(cli("campaign", "report", short, "--provisional", url=url)).stdout
    status = json_of(cli("campaign", "status", short, "--json", url=url))
    assert status["archived_at"] == payload["archived_at"] and status["complete"] is True
    assert "archived" in ok(cli("campaign", "status", short, url=url)).stdout
    assert "archived" in ok(cli("campaign", "health", short, url=url)).stdout
    assert (
        "succeeded (1/3), archived" in ok(cli("campaign", "watch", short, "--once", url=url)).stdout
    )
    assert ok(cli("campaign", "verify", short, "--no-progress", url=url))
    listing = json_of(cli("campaign", "list", "--json", url=url))
    assert listing["campaigns"][0]["archived_at"] == payload["archived_at"]
    assert "succeeded, archived" in ok(cli("campaign", "list", url=url)).stdout
    for command in (("results", short), ("attempts", short), ("compare", short, short)):
        refused(cli("campaign", *command, url=url), "benchmark.campaign.archived")
    refused(cli("campaign", "archive", short, "--yes", url=url), "benchmark.campaign.archived")


def test_archive_without_an_export_says_what_it_kept_and_dropped(
    cli: Invoke, ledger_db: Database
) -> None:
    cid = campaign(ledger_db)
    result = ok(cli("campaign", "archive", cid, "--yes", url=ledger_db.url))
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"archived {cid} at ")
    assert "kept: the report (sha256 " in lines[1] and f"summary of {ITEMS} item(s)" in lines[1]
    assert f"{ITEMS} row(s) of benchmark_campaign_work" in lines[2]
    assert len(lines) == 3


def test_archive_needs_yes_and_a_finished_campaign_and_changes_nothing_otherwise(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    unfinished = campaign(ledger_db, finish=False)
    url = ledger_db.url
    export = tmp_path / "items.jsonl"
    before = every_row(ledger_db)
    refused(cli("campaign", "archive", unfinished, url=url), "ledger.input.confirmation_required")
    refused(
        cli("campaign", "archive", unfinished, "--export", str(export), "--yes", url=url),
        "benchmark.campaign.incomplete",
    )
    assert list(tmp_path.iterdir()) == []  # the export's temporary file is gone too
    refused(
        cli("campaign", "archive", "ffffffff", "--yes", url=url), "benchmark.campaign.not_found"
    )
    assert every_row(ledger_db) == before


@pytest.mark.parametrize("case", ["exists", "no_directory"])
def test_an_export_path_that_cannot_be_used_is_refused_before_anything(
    cli: Invoke, ledger_db: Database, tmp_path: Path, case: str
) -> None:
    cid = campaign(ledger_db)
    export = tmp_path / ("items.jsonl" if case == "exists" else "missing/items.jsonl")
    if case == "exists":
        export.write_text("keep me\n", encoding="utf-8")
    before = every_row(ledger_db)
    code = "ledger.input.export_exists" if case == "exists" else "ledger.input.export_unwritable"
    refused(
        cli("campaign", "archive", cid, "--export", str(export), "--yes", url=ledger_db.url), code
    )
    assert every_row(ledger_db) == before
    if case == "exists":
        assert export.read_text(encoding="utf-8") == "keep me\n"
