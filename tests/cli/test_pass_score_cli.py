"""``--pass-score``: the threshold a score passes at, on ``campaign results``, ``compare`` and
``report --provisional``; 0.5 by default; a value outside 0..1 is a coded refusal."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from benchledger import Database, Worker
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.examples import evaluator as example
from benchledger.examples import example_policy, example_suite
from benchledger.services.campaigns import CampaignService

from .helpers import Invoke, refused
from .test_campaign_commands import FAST
from .test_log_format import run

INVALID = "ledger.input.pass_score_invalid"


def unflagged(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
    """The example's result without its own ``passed``: the threshold decides."""
    result = dict(example.evaluate(claim, heartbeat))
    del result["passed"]
    return result


def finished_campaign(db: Database, version: str) -> str:
    """A finished campaign of 3 cases x 4 locales whose results carry a score only."""
    suite = example_suite(3)
    campaigns = CampaignService(db)
    campaign_id = campaigns.create(example_policy(suite, candidate_model_version=version), suite)
    Worker(campaigns, campaign_id, "w-1", unflagged, retry_base_seconds=0).run()
    assert campaigns.status(campaign_id).report_finalization["status"] == "succeeded"
    return campaign_id


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def two(ledger_db: Database) -> tuple[str, str]:
    return finished_campaign(ledger_db, "2.0"), finished_campaign(ledger_db, "3.0")


def test_results_verdicts_follow_the_pass_score(ledger_db: Database, two: tuple[str, str]) -> None:
    campaign_id = two[0]
    rows = {}
    for given in (None, "0.7", "0", "1"):
        option = () if given is None else ("--pass-score", given)
        result = run(
            "campaign", "results", campaign_id, "--format", "jsonl", *option, url=ledger_db.url
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        rows[given] = jsonl(result.stdout)
    scores = [row["score"] for row in rows[None]]
    assert len(scores) == 12 and min(scores) < 0.7 <= max(scores)  # the threshold bites
    for given, threshold in ((None, 0.5), ("0.7", 0.7), ("0", 0.0), ("1", 1.0)):
        assert [row["passed"] for row in rows[given]] == [s >= threshold for s in scores], given


def test_compare_counts_passes_at_the_pass_score(ledger_db: Database, two: tuple[str, str]) -> None:
    a, b = two

    def compare(*option: str) -> dict[str, Any]:
        result = run("campaign", "compare", a, b, "--json", *option, url=ledger_db.url)
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    scores_a = [
        row["score"]
        for row in jsonl(
            run("campaign", "results", a, "--format", "jsonl", url=ledger_db.url).stdout
        )
    ]
    default, strict = compare(), compare("--pass-score", "0.8")
    assert default["pass_score"] == 0.5 and strict["pass_score"] == 0.8
    assert default["overall"]["passed_a"] == sum(s >= 0.5 for s in scores_a)
    assert strict["overall"]["passed_a"] == sum(s >= 0.8 for s in scores_a)
    assert strict["overall"]["passed_a"] < default["overall"]["passed_a"]


def test_a_provisional_report_counts_at_the_pass_score(
    ledger_db: Database, two: tuple[str, str]
) -> None:
    campaign_id = two[0]
    final = json.loads(run("campaign", "report", campaign_id, "--json", url=ledger_db.url).stdout)
    assert final["pass_score"] == 0.5
    provisional = run(
        "campaign", "report", campaign_id, "--provisional", "--pass-score", "0.8", "--json",
        url=ledger_db.url,
    )  # fmt: skip
    assert provisional.returncode == 0, provisional.stderr
    document = json.loads(provisional.stdout)
    assert document["provisional"] is True and document["pass_score"] == 0.8
    assert document["overall"]["passed"] < final["overall"]["passed"]
    # A finalized report keeps the threshold it was built with.
    usage = run("campaign", "report", campaign_id, "--pass-score", "0.8", url=ledger_db.url)
    assert usage.returncode == 2
    assert usage.stderr.startswith("error: ledger.cli.usage: --pass-score applies to")


@pytest.mark.parametrize("value", ["1.5", "-0.1", "-0", "abc", "nan", "inf", "0,5", "\uff10"])
def test_a_pass_score_outside_0_to_1_is_refused(
    cli: Invoke, ledger_db: Database, value: str
) -> None:
    for command in (
        ("campaign", "results", "feedface"),
        ("campaign", "compare", "feedface", "beefcafe"),
        ("campaign", "report", "feedface", "--provisional"),
    ):
        line = refused(cli(*command, "--pass-score", value, url=ledger_db.url), INVALID)
        assert "--pass-score must be a number from 0 to 1" in line


@pytest.mark.slow
def test_campaign_work_builds_the_report_at_the_pass_score(
    ledger_db: Database, tmp_path: Path
) -> None:
    from .test_log_format import create_campaign

    campaign_id = create_campaign(ledger_db.url, tmp_path)
    worked = run(
        "campaign", "work", campaign_id, "--evaluator", "benchledger.examples.evaluator:evaluate",
        "--pass-score", "0.8", *FAST, url=ledger_db.url,
    )  # fmt: skip
    assert worked.returncode == 0, worked.stderr
    report = run("campaign", "report", campaign_id, "--json", url=ledger_db.url)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["pass_score"] == 0.8
    assert run("campaign", "verify", campaign_id, url=ledger_db.url).returncode == 0
