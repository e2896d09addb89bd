"""Ctrl-C during ``benchledger campaign work``: a real subprocess, a real SIGINT, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger import Database
from benchledger.examples import evaluator as example
from benchledger.models.campaign import WorkRow
from benchledger.services.campaigns import CampaignService

from .test_campaign_commands import EVALUATOR, FAST, write_inputs

pytestmark = pytest.mark.slow

BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))


def start_work(url: str, campaign_id: str, *extra: str, work_ms: int) -> subprocess.Popen[str]:
    env = {**os.environ, example.WORK_MS_ENV: str(work_ms)}
    return subprocess.Popen(
        [BENCHLEDGER, "--url", url, "campaign", "work", campaign_id, "--evaluator", EVALUATOR,
         "--no-progress", *FAST, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a shell job
    )  # fmt: skip


def wait_for(service: CampaignService, campaign_id: str, succeeded: int) -> dict[str, int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = service.status(campaign_id).counts
        if counts["succeeded"] >= succeeded and counts["leased"] > 0:
            return counts
        time.sleep(0.02)
    raise AssertionError("the workers made no progress")


def rows(db: Database, campaign_id: str) -> list[Any]:
    with db.read() as session:
        return list(
            session.execute(
                sa.select(
                    WorkRow.target_locale,
                    WorkRow.suite_case_key,
                    WorkRow.status,
                    WorkRow.attempts,
                    WorkRow.lease_losses,
                    WorkRow.lease_owner,
                    WorkRow.lease_expires_at,
                    WorkRow.last_error_code,
                ).where(WorkRow.campaign_id == campaign_id)
            )
        )


def expected_attempts(locale: str, case_key: str) -> int:
    return example.transient_failures(case_key, locale) + 1


def test_ctrl_c_stops_cleanly_and_a_second_run_finishes_exactly(
    cli: Any, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=12)
    campaign_id = cli(
        "campaign", "create", "--policy", str(policy_file), "--suite", str(suite_file),
        url=ledger_db.url,
    ).stdout.strip()  # fmt: skip
    service = CampaignService(ledger_db)
    process = start_work(ledger_db.url, campaign_id, "--workers", "3", work_ms=120)
    try:
        wait_for(service, campaign_id, succeeded=6)
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole group gets it
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert err.splitlines()[-1].startswith("error: ledger.cli.interrupted: "), err
    assert "Traceback" not in err

    # Stopped cleanly: no lease held, every attempt so far recorded.
    after_stop = rows(ledger_db, campaign_id)
    assert all(row.status != "leased" and row.lease_owner is None for row in after_stop)
    assert any(row.status == "succeeded" for row in after_stop)
    assert any(row.status in ("pending", "retry_wait") for row in after_stop), "stopped too late"
    for row in after_stop:
        if row.status == "succeeded":
            assert row.attempts == expected_attempts(row.target_locale, row.suite_case_key)
    assert not any(row.last_error_code == "benchmark.campaign.lease_expired" for row in after_stop)

    # Resume: the campaign finishes as if it had never been interrupted.
    result = cli(
        "campaign", "work", campaign_id, "--workers", "2", "--evaluator", EVALUATOR, *FAST,
        url=ledger_db.url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    final = rows(ledger_db, campaign_id)
    assert len(final) == 48
    for row in final:
        assert row.status == "succeeded"
        assert row.attempts == expected_attempts(row.target_locale, row.suite_case_key)
    status = service.status(campaign_id)
    assert status.report_finalization["status"] == "succeeded"
    assert "benchmark.campaign.lease_expired" not in status.error_counts


def test_a_second_ctrl_c_stops_at_once_and_held_items_return_after_expiry(
    cli: Any, ledger_db: Database, tmp_path: Path
) -> None:
    policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=8)
    campaign_id = cli(
        "campaign", "create", "--policy", str(policy_file), "--suite", str(suite_file),
        "--max-attempts", "5", url=ledger_db.url,
    ).stdout.strip()  # fmt: skip
    service = CampaignService(ledger_db)
    lease = 2.0
    process = start_work(
        ledger_db.url, campaign_id, "--workers", "2", "--lease-seconds", str(lease), work_ms=1500
    )
    try:
        wait_for(service, campaign_id, succeeded=0)
        os.kill(process.pid, signal.SIGINT)  # only the parent: it tells the workers
        time.sleep(0.2)
        os.kill(process.pid, signal.SIGINT)  # again: stop at once
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    stopped_at = time.time()
    held = [row for row in rows(ledger_db, campaign_id) if row.status == "leased"]
    assert held, "the workers were stopped before holding anything"
    # No lease is held beyond its expiry: each ends at most one lease from now.
    assert all(row.lease_expires_at <= stopped_at + lease for row in held)

    time.sleep(lease + 0.2)
    health = json.loads(cli("campaign", "health", campaign_id, "--json", url=ledger_db.url).stdout)
    assert "benchmark.campaign.lease_expired" in health["reasons"]
    result = cli(
        "campaign", "work", campaign_id, "--workers", "2", "--evaluator", EVALUATOR, *FAST,
        url=ledger_db.url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    final = {(row.target_locale, row.suite_case_key): row for row in rows(ledger_db, campaign_id)}
    assert all(row.status == "succeeded" for row in final.values())
    for row in held:
        again = final[(row.target_locale, row.suite_case_key)]
        # The killed attempt was given back (its worker died: not the case's fault); the
        # evaluator fails its first `failures` attempts, so success came at failures + 1.
        failures = example.transient_failures(row.suite_case_key, row.target_locale)
        assert row.attempts == 1
        assert again.attempts == failures + 1 and again.lease_losses == 1
    held_keys = {(row.target_locale, row.suite_case_key) for row in held}
    for item, row in final.items():
        if item not in held_keys:
            assert row.attempts == expected_attempts(*item), item  # nothing repeated
    assert service.status(campaign_id).report_finalization["status"] == "succeeded"
