"""``benchledger campaign watch``: a snapshot of a campaign in a known state, a watch that
ends by itself when a worker finishes the campaign, a blocked campaign, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from benchledger import Database, Worker
from benchledger.examples import evaluator as example
from benchledger.examples import example_policy, example_suite
from benchledger.services.campaigns import CampaignService

from .helpers import Invoke, refused
from .test_campaign_commands import EVALUATOR, FAST
from .test_log_format import BENCHLEDGER, create_campaign, run

TIMEOUT = "benchmark.campaign.dependency.example.timeout"
UNSUPPORTED = "benchmark.campaign.dependency.example.locale_unsupported"
THROTTLED = "benchmark.campaign.throttled.rate_limited"


def known_state(db: Database) -> str:
    """16 items: 3 succeeded, 1 failed for good, 1 waiting an hour to retry, 1 throttled
    for half an hour, 1 leased, 9 pending; at most one lease at a time (so the flow is
    capped by it)."""
    suite = example_suite(4)
    campaigns = CampaignService(db)
    campaign_id = campaigns.create(example_policy(suite), suite)
    for _ in range(3):
        claim = campaigns.claim(campaign_id, "w-1")
        assert claim is not None
        campaigns.complete(claim, example.result_for(claim.job_payload))
    for code, retryable in ((TIMEOUT, True), (UNSUPPORTED, False)):
        claim = campaigns.claim(campaign_id, "w-1")
        assert claim is not None
        campaigns.fail(claim, code, retryable=retryable, delay_seconds=3600)
    claim = campaigns.claim(campaign_id, "w-1")
    assert claim is not None
    campaigns.throttle(claim, "rate_limited", retry_after=1800)
    assert campaigns.claim(campaign_id, "w-1", lease_seconds=3600) is not None
    campaigns.set_limits(campaign_id, max_concurrent_leases=1)
    return campaign_id


def test_once_json_is_one_snapshot_of_the_campaign(ledger_db: Database) -> None:
    campaign_id = known_state(ledger_db)
    result = run("campaign", "watch", campaign_id[-64:-50], "--once", "--json", url=ledger_db.url)
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    status = CampaignService(ledger_db).status(campaign_id)
    assert view["schema"] == "benchledger.campaign-watch.v1"
    assert view["campaign_id"] == campaign_id
    assert view["status"] == json.loads(json.dumps(status.as_payload()))  # what status() says
    assert view["status"]["counts"] == {
        "pending": 9,
        "leased": 1,
        "retry_wait": 2,
        "succeeded": 3,
        "failed": 1,
    }
    assert view["status"]["error_counts"] == {TIMEOUT: 1, UNSUPPORTED: 1, THROTTLED: 1}
    assert view["status"]["throttled"] == 1
    assert view["status"]["throttled_due_at"] > view["at"] + 1700
    assert view["status"]["next_due_at"] <= view["at"]  # pending items are due now
    assert view["progress"] == {
        "finished": 4,
        "remaining": 12,
        "rate_per_second": None,  # one look has no rate
        "window_seconds": None,
        "eta_seconds": None,
    }
    assert view["flow"]["state"] == "capped"
    assert view["flow"]["capped_by"] == ["max_concurrent_leases"]
    assert view["flow"]["live_leases"] == 1
    assert view["health"]["status"] == "blocked"
    assert "benchmark.campaign.failed" in view["health"]["reasons"]
    assert view["status"]["report_finalization"]["status"] == "pending"
    assert view["ending"] is None  # blocked, but items are still to run

    plain = run("campaign", "watch", campaign_id, "--once", url=ledger_db.url)
    assert plain.returncode == 0, plain.stderr
    (line,) = plain.stdout.splitlines()
    assert re.search(
        r"4/16 ok 3 fail 1 retry 2 \(throttled 1, due in \d\d:\d\d\) lease 1 pending 9", line
    ), line
    assert "-/s ETA -:--" in line
    assert "next due now" in line
    assert "flow capped by max_concurrent_leases" in line
    assert "health blocked" in line and "report pending (0/3)" in line
    assert f"errors {UNSUPPORTED} 1, {TIMEOUT} 1, {THROTTLED} 1" in line  # sorted


def finished_counts(lines: list[str]) -> list[int]:
    return [int(re.search(r" (\d+)/\d+ ok ", line)[1]) for line in lines]  # type: ignore[index]


@pytest.mark.slow
def test_a_watch_ends_by_itself_when_a_worker_finishes_the_campaign(
    ledger_db: Database, tmp_path: Path
) -> None:
    campaign_id = create_campaign(ledger_db.url, tmp_path)
    watch = subprocess.Popen(
        [BENCHLEDGER, "--url", ledger_db.url, "campaign", "watch", campaign_id,
         "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # watching before any work starts
        assert " 0/12 ok 0 " in first, first
        worked = run(
            "campaign", "work", campaign_id, "--evaluator", EVALUATOR, *FAST,
            url=ledger_db.url, env={example.WORK_MS_ENV: "30"},
        )  # fmt: skip
        assert worked.returncode == 0, worked.stderr
        out, err = watch.communicate(timeout=120)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    assert err == ""
    lines = [first.rstrip("\n"), *out.splitlines()]
    assert "12/12 ok 12 fail 0 retry 0 lease 0 pending 0" in lines[-1]
    assert "report succeeded (1/3)" in lines[-1] and "next due never" in lines[-1]
    counts = finished_counts(lines)
    assert counts == sorted(counts)


def test_a_blocked_campaign_ends_the_watch_with_its_code(ledger_db: Database) -> None:
    """A -lite candidate fails ja-JP for good: once nothing else can happen, watch says so."""
    suite = example_suite(3)
    campaigns = CampaignService(ledger_db)
    campaign_id = campaigns.create(example_policy(suite, candidate_model_id="example-lite"), suite)
    Worker(campaigns, campaign_id, "w-1", example.evaluate, retry_base_seconds=0).run()
    failed = campaigns.status(campaign_id).counts["failed"]
    assert failed >= 3  # ja-JP, and any source over 90 characters
    result = run("campaign", "watch", campaign_id, "--interval", "0.1", url=ledger_db.url)
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert "health blocked" in line and "next due never" in line
    assert result.stderr.splitlines() == [
        f"error: benchmark.campaign.failed: {failed} item(s) failed for good: see "
        f"`benchledger campaign status {campaign_id}`"
    ]


@pytest.mark.slow
def test_ctrl_c_ends_a_watch_in_one_line(ledger_db: Database, tmp_path: Path) -> None:
    campaign_id = create_campaign(ledger_db.url, tmp_path)
    watch = subprocess.Popen(
        [BENCHLEDGER, "--url", ledger_db.url, "campaign", "watch", campaign_id,
         "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert watch.stdout is not None
        assert " 0/12 " in watch.stdout.readline()
        os.killpg(watch.pid, signal.SIGINT)
        _out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            os.killpg(watch.pid, signal.SIGKILL)
    assert watch.returncode == 130
    assert err == "error: ledger.cli.interrupted: interrupted\n"


def test_json_needs_once_and_the_campaign_must_exist(cli: Invoke, ledger_db: Database) -> None:
    refused(
        cli("campaign", "watch", "feedfacefeed", "--json", url=ledger_db.url),
        "ledger.cli.usage",
        exit_code=2,
    )
    refused(
        cli("campaign", "watch", "feedfacefeed", "--once", url=ledger_db.url),
        "benchmark.campaign.not_found",
    )
    refused(
        cli("campaign", "watch", "feedfacefeed", "--interval", "0", url=ledger_db.url),
        "ledger.cli.usage",
        exit_code=2,
    )


def test_the_rate_window_measures_the_last_samples() -> None:
    from benchledger.cli.campaign_watch import RateWindow

    window = RateWindow(10.0)
    assert window.rate() is None
    window.add(0.0, 0)
    assert window.rate() is None
    window.add(5.0, 50)
    assert window.rate() == (10.0, 5.0)
    for at, done in ((10.0, 60), (15.0, 70), (20.0, 80)):
        window.add(at, done)
    # the samples kept span the window: (10, 60) to (20, 80)
    assert window.rate() == (2.0, 10.0)
