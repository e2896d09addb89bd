"""``benchledger work --all`` against a real HTTP model: limit groups, throttling, kills.

Real processes (the fleet's, spawned by the command), a real model server
(:class:`benchledger.testing.ModelServer`) counting the requests in flight,
and the example HTTP evaluator (``benchledger.examples.model_api``), which
raises ``Throttled`` on a 429.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger import Database
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.examples import model_api
from benchledger.models.campaign import AttemptRow, WorkRow
from benchledger.services.campaigns import CampaignService
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory
from benchledger.testing.model_server import ModelServer

pytestmark = pytest.mark.slow

BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))
EVALUATOR = "http-judge=benchledger.examples.model_api:evaluate"


def plan(model: str, cases: int) -> CampaignPlan:
    suite = SuiteFactory(
        cases=[
            SuiteCaseFactory(key=f"case-{i:04d}", source_text=f"Translate sentence {i}.")
            for i in range(cases)
        ]
    )
    policy = CampaignPolicyFactory(
        suite=suite, required_locales=("de-DE", "fr-FR"), candidate_model_id=model
    )
    return CampaignPlan(policy, suite)


def three_campaigns(service: CampaignService, cases: int) -> list[str]:
    campaign_ids = []
    for index in range(3):
        made = plan(f"model-{index}", cases)
        campaign_ids.append(
            service.create(made.policy, made.suite, evaluator="http-judge", max_attempts=3)
        )
    return campaign_ids


def start_fleet(
    url: str, model_url: str, *flags: str, key_file: Path | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, model_api.URL_ENV: model_url}
    signing = [] if key_file is None else ["--signing-key-file", str(key_file)]
    return subprocess.Popen(
        [BENCHLEDGER, "--url", url, *signing, "work", "--all", "--evaluator", EVALUATOR,
         "--retry-base-seconds", "0.2", "--retry-max-seconds", "1", "--poll-seconds", "0.2",
         "--refresh-seconds", "0.5", *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def items(db: Database, campaign_ids: list[str]) -> list[Any]:
    work = WorkRow.__table__
    with db.engine.connect() as connection:
        return list(connection.execute(sa.select(work).where(work.c.campaign_id.in_(campaign_ids))))


def history(db: Database, campaign_ids: list[str]) -> list[Any]:
    attempts = AttemptRow.__table__
    with db.engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(attempts)
                .where(attempts.c.campaign_id.in_(campaign_ids))
                .order_by(attempts.c.attempt_id)
            )
        )


def test_three_campaigns_in_one_limit_group_never_exceed_its_cap(ledger_db: Database) -> None:
    service = CampaignService(ledger_db)
    campaign_ids = three_campaigns(service, cases=20)  # 40 items each
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_concurrent_leases=20, max_claims_per_minute=600)
    # The provider allows 40 requests a second (a 1 s window): 20 lanes at 50 ms each
    # would make 400, so it throttles, and says when to come back (Retry-After: 1).
    with ModelServer(per_minute=40, window_seconds=1.0, latency_seconds=0.05) as server:
        process = start_fleet(ledger_db.url, server.url, "--workers", "4", "--concurrency", "32")
        try:
            _out, err = process.communicate(timeout=240)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        stats = server.stats()
    assert process.returncode == 0, err
    assert "Traceback" not in err
    # The group's cap held at every instant, across 4 processes x 32 lanes.
    assert 1 <= stats.max_in_flight <= 20
    assert stats.throttled > 0, "the provider never throttled: the test proves nothing"
    assert stats.over_quota_admitted == 0
    rows = items(ledger_db, campaign_ids)
    assert len(rows) == 120
    # Nothing failed for throttling, no 429 spent an attempt, every item done once.
    assert all(row.status == "succeeded" and row.attempts == 1 for row in rows)
    assert sum(row.throttles for row in rows) == stats.throttled
    recorded = history(ledger_db, campaign_ids)
    succeeded = Counter(row.work_id for row in recorded if row.outcome == "succeeded")
    assert set(succeeded.values()) == {1} and len(succeeded) == 120
    assert stats.answered == 120
    assert Counter(row.outcome for row in recorded)["throttled"] == stats.throttled
    for campaign_id in campaign_ids:
        status = service.status(campaign_id)
        assert status.report_finalization["status"] == "succeeded"
        assert service.verify(campaign_id).ok


def test_killed_fleet_processes_lose_nothing_and_finish_nothing_twice(
    ledger_db: Database,
) -> None:
    service = CampaignService(ledger_db)
    campaign_ids = three_campaigns(service, cases=15)  # 90 items
    with ModelServer(latency_seconds=0.1) as server:
        first = start_fleet(
            ledger_db.url, server.url, "--workers", "2", "--concurrency", "8",
            "--lease-seconds", "2",
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = sum(row.status == "succeeded" for row in items(ledger_db, campaign_ids))
                if done >= 20:
                    break
                time.sleep(0.1)
            os.killpg(first.pid, signal.SIGKILL)  # the parent and every fleet process
            first.communicate(timeout=30)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
        assert any(row.status != "succeeded" for row in items(ledger_db, campaign_ids))
        second = start_fleet(
            ledger_db.url, server.url, "--workers", "2", "--concurrency", "8",
            "--lease-seconds", "2",
        )  # fmt: skip
        try:
            _out, err = second.communicate(timeout=240)
        finally:
            if second.poll() is None:
                os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, err
    rows = items(ledger_db, campaign_ids)
    assert all(row.status == "succeeded" for row in rows)
    recorded = history(ledger_db, campaign_ids)
    succeeded = Counter(row.work_id for row in recorded if row.outcome == "succeeded")
    assert len(succeeded) == 90 and set(succeeded.values()) == {1}
    for campaign_id in campaign_ids:
        assert service.status(campaign_id).report_finalization["status"] == "succeeded"
        assert service.verify(campaign_id).ok


def test_a_fleet_refuses_to_start_without_saying_which_campaigns(ledger_db: Database) -> None:
    result = subprocess.run(
        [BENCHLEDGER, "--url", ledger_db.url, "work", "--evaluator", EVALUATOR],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: ledger.cli.usage: ")


def test_limits_commands(ledger_db: Database) -> None:
    service = CampaignService(ledger_db)
    campaign_ids = three_campaigns(service, cases=2)
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BENCHLEDGER, "--url", ledger_db.url, "limits", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    shown = run("set", group, "--max-concurrent", "20", "--per-minute", "600")
    assert shown.returncode == 0, shown.stderr
    assert "max concurrent 20, 600 claims/min, none cost/min" in shown.stdout
    assert run("set", group, "--cost-per-minute", "5000").returncode == 0
    usage = service.group_usage(group)
    assert (usage.group.max_concurrent_leases, usage.group.max_cost_per_minute) == (20, 5000)
    listed = run("list")
    assert group in listed.stdout
    show = run("show", group)
    assert "campaigns: 3" in show.stdout and "0 live leases" in show.stdout
    bad = run("set", group, "--per-minute", "-4")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: benchmark.campaign.limit_group_invalid: ")
    assert service.group_usage(group).group.max_claims_per_minute == 600
    cleared = run("clear", group)
    assert cleared.returncode == 0 and service.group_limits() == ()


def test_a_fleet_signs_each_campaigns_results_for_that_campaign(
    ledger_db: Database, tmp_path: Path
) -> None:
    service = CampaignService(ledger_db)
    campaign_ids = three_campaigns(service, cases=2)
    key = tmp_path / "signing.key"
    key.write_text(secrets.token_hex(32), encoding="utf-8")
    other = tmp_path / "other.key"
    other.write_text(secrets.token_hex(32), encoding="utf-8")
    with ModelServer() as server:
        process = start_fleet(ledger_db.url, server.url, "--workers", "2", key_file=key)
        _out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err

    def verify(key_path: Path, campaign_id: str) -> int:
        return subprocess.run(
            [BENCHLEDGER, "--url", ledger_db.url, "--signing-key-file", str(key_path),
             "campaign", "verify", campaign_id, "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        ).returncode  # fmt: skip

    # Each result is bound to its own campaign's policy: each verifies with the key...
    assert all(verify(key, campaign_id) == 0 for campaign_id in campaign_ids)
    # ... and none with another key.
    assert verify(other, campaign_ids[0]) == 1
