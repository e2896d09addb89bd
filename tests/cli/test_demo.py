"""``benchledger demo`` at reduced size, on both backends, twice."""

from __future__ import annotations

import pytest

from benchledger import Database
from benchledger.domain.study import StudyState
from benchledger.examples import example_policy, example_suite
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService

from .helpers import Invoke, ok

pytestmark = pytest.mark.slow


def test_the_demo_runs_end_to_end_and_again(cli: Invoke, ledger_db: Database) -> None:
    args = ("demo", "--cases", "6", "--workers", "2", "--no-progress")
    first = ok(cli(*args, url=ledger_db.url)).stdout
    for expected in (
        "campaign 1: release candidate",
        "6 cases x 4 locales = 24 items",
        "ja-JP",
        "overall",
        "healthy",
        "blocked",
        "failed: some items failed for good: `campaign retry`",
        "example.locale_unsupported: last error of some items (the evaluator's code)",
        "retained storage (what runs keep: checkpoints, logs): 8 GiB",
        "attempts in",
        "admission 5 refused: unavailable: Finite study budget is exhausted.",
        "(diagnostic)",
        "state stopped",
    ):
        assert expected in first, expected
    assert "benchmark.campaign.error.benchmark.campaign" not in first  # no doubled codes
    assert "8589934592" not in first  # sizes in units, not raw bytes

    campaigns = CampaignService(ledger_db)
    release = example_policy(example_suite(6)).campaign_id
    status = campaigns.status(release)
    assert status.complete and status.report_finalization["status"] == "succeeded"
    report = campaigns.load_report(release)
    assert report["overall"]["items"] == 24

    second = ok(cli(*args, url=ledger_db.url)).stdout
    assert "finished by an earlier demo run" in second
    assert campaigns.load_report(release) == report
    studies = StudyService(ledger_db)
    listing = studies.list("demo-owner")
    assert len(listing.studies) == 1  # the second run replayed, it did not start another
    page = studies.get("demo-owner", listing.studies[0].id)
    assert page.study.state is StudyState.STOPPED
    assert page.charged.attempt_slots == page.study.limits.attempt_slots == 4
    assert [item.state.value for item in page.reservations] == ["settled"] * 4
