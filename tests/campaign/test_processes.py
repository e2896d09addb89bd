"""Real worker processes: no double leases, every item exactly once, crash recovery."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.services.campaigns import CampaignService

from .helpers import make_plan, result_for, work_row
from .procs import claim_and_hang, run_worker

WORKERS = 4
CASES, LOCALES = 150, ("de-DE", "fr-FR", "ja-JP", "pt-BR")  # 600 items


@pytest.mark.slow
def test_many_processes_never_share_a_lease(ledger_db: Database, tmp_path: Path) -> None:
    plan = make_plan(cases=CASES, locales=LOCALES)
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=3)
    context = multiprocessing.get_context("spawn")
    logs = [tmp_path / f"worker-{n}.jsonl" for n in range(WORKERS)]
    processes = [
        context.Process(target=run_worker, args=(ledger_db.url, cid, f"worker-{n}", str(log), n))
        for n, log in enumerate(logs)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=240)
        assert process.exitcode == 0, process.exitcode

    leases = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    by_item: dict[str, list[dict[str, object]]] = defaultdict(list)
    for lease in leases:
        by_item[str(lease["work_id"])].append(lease)
    expected = {work.work_id for work in plan.work()}
    assert set(by_item) == expected
    # Every lease is distinct: one (item, attempt) pair and one token per claim.
    assert len({(lease["work_id"], lease["attempt"]) for lease in leases}) == len(leases)
    assert len({lease["token"] for lease in leases}) == len(leases)
    completions = Counter(
        str(lease["work_id"]) for lease in leases if lease["ended"] == "completed"
    )
    assert set(completions.values()) == {1} and len(completions) == len(expected)
    retried = 0
    for work_id, item_leases in by_item.items():
        item_leases.sort(key=lambda lease: lease["attempt"])  # type: ignore[arg-type,return-value]
        # Attempts 1..k, each released by its holder (fail/complete are compare-and-set on
        # the holder's token, so a second live lease would have made one of them lease_lost),
        # and the holders' intervals, on the system-wide monotonic clock, never overlap.
        assert [lease["attempt"] for lease in item_leases] == list(range(1, len(item_leases) + 1))
        assert [lease["ended"] for lease in item_leases][-1] == "completed"
        for earlier, later in itertools.pairwise(item_leases):
            assert earlier["to"] < later["from"], work_id  # type: ignore[operator]
        retried += len(item_leases) > 1
        row = work_row(ledger_db, work_id)
        assert (row.status, row.attempts) == ("succeeded", len(item_leases))
        assert json.loads(row.result_json)["worker"] == item_leases[-1]["worker"]
    assert retried > 10  # the flaky first attempts really were retried
    assert len({lease["worker"] for lease in leases}) == WORKERS  # everyone worked
    status = service.status(cid)
    assert status.complete and status.counts["succeeded"] == len(expected)
    assert service.health(cid).reasons == (dom.REPORT_MISSING,)


@pytest.mark.slow
def test_a_killed_workers_item_comes_back_after_its_lease(ledger_db: Database) -> None:
    plan = make_plan(cases=1, locales=("de-DE",))
    service = CampaignService(ledger_db)  # the real clock
    cid = service.create(plan.policy, plan.suite)
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=claim_and_hang, args=(ledger_db.url, cid, 3.0, child))
    process.start()
    try:
        assert parent.poll(120)
        work_id, token, expires_at, pid = parent.recv()
        os.kill(pid, signal.SIGKILL)
        process.join(timeout=30)
        assert process.exitcode == -signal.SIGKILL
        assert work_row(ledger_db, work_id).lease_token == token  # still leased by the dead
        assert service.claim(cid, "survivor") is None  # not before the lease expires
        deadline = time.time() + 30
        while (claim := service.claim(cid, "survivor", lease_seconds=60)) is None:
            assert time.time() < deadline
            time.sleep(0.1)
    finally:
        if process.is_alive():
            process.kill()
    assert time.time() >= expires_at
    # The killed worker's attempt was given back: the survivor's is attempt 1 again.
    assert (claim.work_id, claim.attempt, claim.lease_owner) == (work_id, 1, "survivor")
    assert claim.lease_token != token
    assert service.complete(claim, result_for(claim)).status == "succeeded"
    row = work_row(ledger_db, work_id)
    assert (row.attempts, row.lease_losses) == (1, 1)
