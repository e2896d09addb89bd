"""Flow control: ``max_concurrent_leases`` and ``max_claims_per_minute`` enforced by the claim.

First one process with an injected clock (the rules, exactly), then 8 real worker processes
on each backend (the caps hold under contention, and a cap of 0 pauses them all).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import make_plan, result_for

C = "benchmark.campaign."


# -- the rules, one process, an injected clock -------------------------------------------


def test_concurrent_leases_are_capped_and_expired_ones_do_not_count(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    service.set_limits(cid, max_concurrent_leases=2)
    first = service.claim(cid, "w-1", lease_seconds=60)
    second = service.claim(cid, "w-2", lease_seconds=120)
    assert first is not None and second is not None
    assert service.claim(cid, "w-3") is None
    service.complete(first, result_for(first))
    third = service.claim(cid, "w-3", lease_seconds=60)
    assert third is not None
    assert service.claim(cid, "w-4") is None
    clock.advance(61)  # the third lease expired unrenewed: it no longer counts
    fourth = service.claim(cid, "w-4")
    assert fourth is not None
    assert service.controls(cid).live_leases == 2


def test_claims_per_minute_are_capped_in_any_sixty_seconds(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    service.set_limits(cid, max_claims_per_minute=2)

    def claim() -> bool:
        got = service.claim(cid, "w-1")
        if got is not None:
            service.complete(got, result_for(got))
        return got is not None

    start = clock()
    assert claim()
    clock.advance(30)
    assert claim()
    clock.advance(29)
    assert not claim()  # two in the last 59 s
    clock.set(start + 60.5)
    assert claim()  # the first fell out of the window
    assert not claim()
    clock.set(start + 90.5)
    assert claim()
    assert service.controls(cid).claims_last_minute == 2


def test_the_claim_log_keeps_about_a_minute(service: CampaignService, clock: LedgerClock) -> None:
    plan = make_plan(cases=50, candidate_model_id="logged")  # 100 items
    cid = service.create(plan.policy, plan.suite, max_claims_per_minute=1000)
    for _ in range(100):
        claim = service.claim(cid, "w-1")
        assert claim is not None
        service.complete(claim, result_for(claim))
        clock.advance(3)  # 20 claims a minute, for five minutes
    with service.db.engine.connect() as connection:
        kept = connection.exec_driver_sql(
            "SELECT count(*) FROM benchmark_campaign_claims"
        ).scalar_one()
    assert 19 <= kept <= 20 + 32  # the window, plus at most one pruning period
    assert service.controls(cid).claims_last_minute == 19  # 3 s after the last: (t-60, t]


def test_a_cap_of_zero_pauses_and_health_says_so(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    for caps in ({"max_concurrent_leases": 0}, {"max_claims_per_minute": 0}):
        controls = service.set_limits(cid, **caps)
        assert controls.paused
        assert service.claim(cid, "w-1") is None
        health = service.health(cid)
        assert C + "paused" in health.reasons and health.status == "degraded"
        clock.advance(7200)
        assert C + "stalled" not in service.health(cid).reasons
        service.set_limits(cid, max_concurrent_leases=None, max_claims_per_minute=None)
    assert not service.controls(cid).paused
    assert service.claim(cid, "w-1") is not None
    assert C + "paused" not in service.health(cid).reasons


def test_caps_are_set_at_create_in_its_transaction(service: CampaignService) -> None:
    plan = make_plan(candidate_model_id="capped-at-create")
    with refused(service.db, C + "limit_invalid"):
        service.create(plan.policy, plan.suite, max_concurrent_leases=-1)
    cid = service.create(plan.policy, plan.suite, max_concurrent_leases=1, max_claims_per_minute=0)
    controls = service.controls(cid)
    assert (controls.max_concurrent_leases, controls.max_claims_per_minute) == (1, 0)
    assert controls.paused and service.claim(cid, "w-1") is None
    assert service.create(plan.policy, plan.suite) == cid  # again, without caps: kept
    assert service.controls(cid).max_concurrent_leases == 1


def test_bad_caps_are_refused_and_change_nothing(service: CampaignService, cid: str) -> None:
    for value in (-1, 1_000_001, 2.5, "3", True):
        with refused(service.db, C + "limit_invalid"):
            service.set_limits(cid, max_concurrent_leases=value)  # type: ignore[arg-type]
        with refused(service.db, C + "limit_invalid"):
            service.set_limits(cid, max_claims_per_minute=value)  # type: ignore[arg-type]
    with refused(service.db, C + "not_found"):
        service.set_limits("benchmark-campaign-" + "0" * 64, max_concurrent_leases=1)


# -- 8 real worker processes ---------------------------------------------------------------

WORKERS = 8


def flow_worker(
    url: str,
    campaign_ids: list[str],
    worker_id: str,
    log_path: str,
    hold: float,
    stop_path: str,
) -> None:
    """Claim from the first campaign that hands out work, hold the item ``hold`` seconds,
    complete; until ``stop_path`` exists.

    Logs each lease as one JSON line: the campaign, and the monotonic (system-wide)
    instants right after the claim returned and right before the completion (both
    inside the lease).
    """
    database = Database(url)
    service = CampaignService(database)
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(json.dumps({"ready": True}) + "\n")
            log.flush()
            while not Path(stop_path).exists():
                claim = None
                for campaign_id in campaign_ids:
                    claim = service.claim(campaign_id, worker_id, lease_seconds=120)
                    if claim is not None:
                        break
                if claim is None:
                    time.sleep(0.02)
                    continue
                held_from = time.monotonic_ns()
                time.sleep(hold)
                held_to = time.monotonic_ns()
                service.complete(claim, result_for(claim))
                line = {"campaign_id": claim.campaign_id, "from": held_from, "to": held_to}
                log.write(json.dumps({**line, "work_id": claim.work_id}) + "\n")
                log.flush()
    finally:
        database.dispose()


class Pool:
    def __init__(self, db: Database, campaign_ids: list[str], directory: Path, hold: float):
        self.logs = [directory / f"flow-{n}.jsonl" for n in range(WORKERS)]
        self.stop = directory / "stop"
        context = multiprocessing.get_context("spawn")
        self.processes = [
            context.Process(
                target=flow_worker,
                args=(db.url, campaign_ids, f"flow-{n}", str(log), hold, str(self.stop)),
            )
            for n, log in enumerate(self.logs)
        ]
        for process in self.processes:
            process.start()

    def leases(self, campaign_id: str) -> list[dict[str, Any]]:
        lines = [
            json.loads(line)
            for log in self.logs
            if log.exists()
            for line in log.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        return [line for line in lines if line.get("campaign_id") == campaign_id]

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not all(log.exists() and log.read_text() for log in self.logs):
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.touch()
        for process in self.processes:
            process.join(timeout=60)
            if process.exitcode is None:
                process.kill()
        assert all(process.exitcode == 0 for process in self.processes)


def wait_for(predicate: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def most_at_once(leases: list[dict[str, Any]]) -> int:
    events = sorted(
        [(lease["from"], 1) for lease in leases] + [(lease["to"], -1) for lease in leases]
    )
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


@pytest.mark.slow
def test_eight_workers_respect_pauses_caps_and_cancel(ledger_db: Database, tmp_path: Path) -> None:
    """One pool of 8 worker processes (~10 s plus their start-up) on two campaigns:

    1. both paused by a cap of 0: nothing is claimed;
    2. the first gets max_concurrent_leases=3: reached under contention, never exceeded;
    3. it is cancelled part way: nothing more is claimed from it; resumed, it finishes;
    4. the second gets max_claims_per_minute=12: exactly 12 claims, though every worker
       keeps asking.
    """
    locales = ("de-DE", "fr-FR", "ja-JP", "pt-BR")
    service = CampaignService(ledger_db)
    capped = make_plan(cases=16, locales=locales)  # 64 items
    rated = make_plan(cases=10, locales=locales, candidate_model_id="rated")  # 40 items
    first = service.create(capped.policy, capped.suite)
    second = service.create(rated.policy, rated.suite)
    service.set_limits(first, max_concurrent_leases=0)
    service.set_limits(second, max_claims_per_minute=0)
    pool = Pool(ledger_db, [first, second], tmp_path, hold=0.05)
    try:
        pool.wait_ready()
        time.sleep(1.0)
        assert pool.leases(first) == pool.leases(second) == []
        assert service.status(first).counts["pending"] == capped.work_count

        service.set_limits(first, max_concurrent_leases=3)
        wait_for(lambda: service.status(first).counts["succeeded"] >= 24)
        service.cancel(first)
        wait_for(lambda: service.status(first).counts["leased"] == 0, timeout=30)
        frozen = service.status(first).counts["succeeded"]
        time.sleep(1.0)
        assert service.status(first).counts["succeeded"] == frozen < capped.work_count
        service.resume(first)
        wait_for(lambda: service.status(first).complete)

        service.set_limits(second, max_claims_per_minute=12)
        wait_for(lambda: service.status(second).counts["succeeded"] >= 12)
        time.sleep(1.5)  # every worker keeps asking
        assert service.status(second).counts["succeeded"] == 12
        assert service.controls(second).claims_last_minute == 12
    finally:
        pool.close()
    leases = pool.leases(first)
    assert sorted(lease["work_id"] for lease in leases) == sorted(w.work_id for w in capped.work())
    assert most_at_once(leases) == 3
    assert len(pool.leases(second)) == 12
