"""Crashes cost no attempts: a storm of SIGKILLs over two asyncio workers with 32 cases in
flight each fails no item, and a report finalizer killed three times still finalizes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.services.campaigns import CampaignService
from benchledger.workers.drivers import run_report_finalization
from campaign.helpers import make_plan, report_state, result_for

from .crash_procs import hang_in_the_report
from .evaluators import run_async_worker
from .test_processes import leased, sqlite_only, wait_for
from .test_workers import rows, run

pytestmark = pytest.mark.slow
SPAWN = multiprocessing.get_context("spawn")
KILLS = 12


def _worker(db: Database, cid: str, tmp_path: Path, number: int) -> Any:
    process = SPAWN.Process(
        target=run_async_worker,
        args=(db.url, cid, f"w-{number}", 32, 2.0, 0.4, str(tmp_path / f"summary-{number}.json")),
    )
    process.start()
    return process


def test_a_sigkill_storm_over_32_cases_in_flight_fails_no_item(
    ledger_db: Database, ledger_backend: str, tmp_path: Path
) -> None:
    sqlite_only(ledger_backend)
    plan = make_plan(cases=150, locales=("de-DE", "fr-FR"))  # 300 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=3)
    workers = [_worker(ledger_db, cid, tmp_path, n) for n in range(2)]
    started = 2
    try:
        for kill in range(KILLS):
            victim = workers[kill % 2]
            # Kill it with cases in flight (its leases, and maybe its partner's).
            wait_for(lambda: leased(service, cid) >= 16 or service.status(cid).complete)
            if service.status(cid).complete:
                break
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(timeout=30)
            workers[kill % 2] = _worker(ledger_db, cid, tmp_path, started)
            started += 1
    finally:
        for process in workers:
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join(timeout=30)
    # Whatever the storm left leased comes back on expiry; an in-process worker ends it.
    summary = run(
        "asyncio",
        ledger_db,
        cid,
        lambda claim: (0.0, None),
        concurrency=32,
        until_finished=True,
        poll_seconds=0.2,
    )
    final = rows(ledger_db, cid)
    assert {row.status for row in final} == {"succeeded"}, "an item failed in the storm"
    # No crash was charged to a case: every item succeeded at its first attempt, the
    # leases its killed workers held counted as losses instead.
    assert {row.attempts for row in final} == {1}
    losses = [row.lease_losses for row in final]
    assert sum(losses) >= 16 and max(losses) < dom.DEFAULT_MAX_LEASE_LOSSES, sorted(losses)
    assert summary.report is not None and service.status(cid).complete
    assert service.verify(cid).ok  # the history of every lost lease agrees with its item


def test_a_report_finalizer_killed_three_times_still_finalizes(
    ledger_db: Database, ledger_backend: str, tmp_path: Path
) -> None:
    sqlite_only(ledger_backend)
    plan = make_plan(cases=3, locales=("de-DE",))
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=2)
    while (claim := service.claim(cid, "w-1")) is not None:
        service.complete(claim, result_for(claim))
    mark = tmp_path / "building"
    for kill in range(1, 4):
        process = SPAWN.Process(
            target=hang_in_the_report, args=(ledger_db.url, cid, str(mark), 1.0)
        )
        process.start()
        wait_for(lambda kill=kill: mark.exists() and len(mark.read_text().splitlines()) == kill)
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=30)
        time.sleep(1.1)  # its lease runs out: nobody renews it any more
    state = report_state(ledger_db, cid)
    assert state.status == "leased" and state.lease_owner == "r-doomed"
    outcome = run_report_finalization(service, cid, "r-survivor", lease_seconds=30)
    assert outcome is not None and outcome.status == "succeeded"
    state = report_state(ledger_db, cid)
    # Three killed finalizers cost the report no attempt; its budget of 2 was never at risk.
    assert (state.status, state.attempts, state.lease_losses) == ("succeeded", 1, 3)
    service.load_report(cid)
