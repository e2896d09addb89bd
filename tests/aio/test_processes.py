"""Real processes with many cases in flight: SIGKILL, Ctrl-C, and ``campaign work``.

A process holding 32 leases is killed: the leases come back on expiry and the
next worker finishes them (nothing lost, nothing completed twice, attempts
within the maximum). A real SIGINT lets the cases in flight finish; a second
abandons them to lease expiry. The command line runs async and blocking
evaluators K at a time per process.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.services.campaigns import CampaignService
from campaign.helpers import make_plan

from .evaluators import run_async_worker
from .test_workers import rows, run

TESTS = Path(__file__).resolve().parents[1]
BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))
pytestmark = pytest.mark.slow


def sqlite_only(backend: str) -> None:
    """Signal handling and the command line do not depend on the backend: SQLite only."""
    if backend != "sqlite":
        pytest.skip("backend-independent: run on SQLite")


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def start_worker(
    db: Database,
    cid: str,
    tmp_path: Path,
    *,
    concurrency: int,
    lease_seconds: float,
    eval_seconds: float,
) -> tuple[Any, Path]:
    summary = tmp_path / "summary.json"
    process = multiprocessing.get_context("spawn").Process(
        target=run_async_worker,
        args=(db.url, cid, "w-doomed", concurrency, lease_seconds, eval_seconds, str(summary)),
    )
    process.start()
    return process, summary


def leased(service: CampaignService, cid: str) -> int:
    return service.status(cid).counts["leased"]


def test_sigkill_with_32_in_flight_loses_nothing(ledger_db: Database, tmp_path: Path) -> None:
    plan = make_plan(cases=24, locales=("de-DE", "fr-FR"))  # 48 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=3)
    process, _ = start_worker(
        ledger_db, cid, tmp_path, concurrency=32, lease_seconds=4.0, eval_seconds=600
    )
    try:
        wait_for(lambda: leased(service, cid) == 32)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL
    assert leased(service, cid) == 32  # held by nobody now; they come back on expiry

    summary = run(
        "asyncio",
        ledger_db,
        cid,
        lambda claim: (0.05, None),
        concurrency=32,
        until_finished=True,
        poll_seconds=0.2,
    )
    final = rows(ledger_db, cid)
    assert {row.status for row in final} == {"succeeded"} and len(final) == 48
    # The killed process's 32 leases came back, each giving its attempt back and counting
    # a lease loss (a lease its loaded event loop could not renew in time may have come
    # back before: one more loss); every item was completed once, by the next worker, at
    # its first attempt: the crash cost no item an attempt.
    assert {row.attempts for row in final} == {1}
    losses = sorted(row.lease_losses for row in final)
    assert sum(losses) >= 32 and max(losses) < dom.DEFAULT_MAX_LEASE_LOSSES, losses
    assert all(json.loads(row.result_json)["worker"] == "w-asyncio" for row in final)
    assert summary.succeeded == 48 and summary.report is not None
    assert service.status(cid).report_finalization["status"] == "succeeded"


def test_ctrl_c_lets_the_cases_in_flight_finish(
    ledger_db: Database, ledger_backend: str, tmp_path: Path
) -> None:
    sqlite_only(ledger_backend)
    plan = make_plan(cases=24, locales=("de-DE", "fr-FR"))  # 48 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite)
    process, summary_path = start_worker(
        ledger_db, cid, tmp_path, concurrency=16, lease_seconds=60, eval_seconds=2.0
    )
    try:
        wait_for(lambda: leased(service, cid) == 16)
        os.kill(process.pid, signal.SIGINT)
        process.join(timeout=60)
    finally:
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0
    summary = json.loads(summary_path.read_text())
    assert summary == {"cases": 16, "succeeded": 16, "stopped": True, "signals": 1}
    counts = service.status(cid).counts
    assert (counts["succeeded"], counts["leased"], counts["pending"]) == (16, 0, 32)


def test_a_second_ctrl_c_abandons_the_cases_to_lease_expiry(
    ledger_db: Database, ledger_backend: str, tmp_path: Path
) -> None:
    sqlite_only(ledger_backend)
    plan = make_plan(cases=8, locales=("de-DE", "fr-FR"))  # 16 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=2)
    process, summary_path = start_worker(
        ledger_db, cid, tmp_path, concurrency=8, lease_seconds=3.0, eval_seconds=600
    )
    try:
        wait_for(lambda: leased(service, cid) == 8)
        os.kill(process.pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(process.pid, signal.SIGINT)
        process.join(timeout=30)
    finally:
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0
    summary = json.loads(summary_path.read_text())
    assert summary == {"cases": 0, "succeeded": 0, "stopped": True, "signals": 2}
    assert leased(service, cid) == 8  # abandoned, not failed: back when the leases expire
    run(
        "asyncio",
        ledger_db,
        cid,
        lambda claim: (0.0, None),
        concurrency=8,
        until_finished=True,
        poll_seconds=0.2,
    )
    final = rows(ledger_db, cid)
    assert {row.status for row in final} == {"succeeded"}
    # The 8 abandoned cases' leases ran out: their attempts were given back, a loss each.
    assert {row.attempts for row in final} == {1}
    assert sorted(row.lease_losses for row in final) == [0] * 8 + [1] * 8


def cli(db: Database, *args: str, **popen: Any) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "BENCHLEDGER_TEST_EVAL_SECONDS": "0.4",
    }
    return subprocess.Popen(
        [BENCHLEDGER, "--url", db.url, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


@pytest.mark.parametrize(
    ("evaluator", "workers"),
    [("aio.evaluators:slow_async", 2), ("aio.evaluators:slow_blocking", 1)],
    ids=["async", "blocking"],
)
def test_campaign_work_with_concurrency(
    ledger_db: Database, ledger_backend: str, evaluator: str, workers: int
) -> None:
    sqlite_only(ledger_backend)
    plan = make_plan(cases=16, locales=("de-DE", "fr-FR"))  # 32 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite)
    command = cli(
        ledger_db,
        "campaign", "work", cid, "--workers", str(workers), "--concurrency", "8",
        "--evaluator", evaluator, "--no-progress",
    )  # fmt: skip
    output, _ = command.communicate(timeout=120)
    assert command.returncode == 0, output
    final = rows(ledger_db, cid)
    assert {(row.status, row.attempts) for row in final} == {("succeeded", 1)}
    assert len({json.loads(row.result_json)["worker"] for row in final}) == workers  # each one
    assert service.status(cid).report_finalization["status"] == "succeeded"


def test_campaign_work_ctrl_c_finishes_the_cases_in_flight(
    ledger_db: Database, ledger_backend: str
) -> None:
    sqlite_only(ledger_backend)
    plan = make_plan(cases=24, locales=("de-DE", "fr-FR"))  # 48 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite)
    command = cli(
        ledger_db,
        "campaign", "work", cid, "--workers", "1", "--concurrency", "8",
        "--evaluator", "aio.evaluators:slow_async", "--no-progress", "--lease-seconds", "60",
    )  # fmt: skip
    try:
        wait_for(lambda: leased(service, cid) >= 8)
        command.send_signal(signal.SIGINT)
        output, _ = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode == 130, output
    counts = service.status(cid).counts
    assert counts["leased"] == 0 and counts["succeeded"] >= 8 and counts["pending"] > 0
