"""Real worker processes survive what production throws at them, on both backends."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.faults import STARTUP_OUTAGE
from benchledger.services.campaigns import CampaignService
from helpers import OutsideLock

from .helpers import MAX_ATTEMPTS, Crew, PostgresUnderTest, chaos_plan

pytestmark = pytest.mark.slow


def _campaign(db: Database, cases: int) -> tuple[str, object]:
    plan = chaos_plan(cases)
    service = CampaignService(db)
    return service.create(plan.policy, plan.suite, max_attempts=MAX_ATTEMPTS), plan


def _wait_until(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _pool(db: Database, cid: str, *, work_ms: int) -> tuple[list[str], dict[str, str]]:
    """`campaign work` with two workers and the example evaluator taking ``work_ms``."""
    command = [
        str(Path(sys.executable).parent / "benchledger"),
        "--url", db.url,
        "campaign", "work", cid, "--workers", "2",
        "--evaluator", "benchledger.examples.evaluator:evaluate",
        "--retry-base-seconds", "0.05", "--retry-max-seconds", "0.2", "--poll-seconds", "0.1",
    ]  # fmt: skip
    return command, {**os.environ, "BENCHLEDGER_EXAMPLE_WORK_MS": str(work_ms)}


def _succeeded(db: Database, campaign_id: str) -> int:
    with db.engine.connect() as connection:
        return int(
            connection.execute(
                sa.text(
                    "SELECT COUNT(*) FROM benchmark_campaign_work "
                    "WHERE campaign_id = :c AND status = 'succeeded'"
                ),
                {"c": campaign_id},
            ).scalar_one()
        )


def test_sigkill_of_workers_mid_case_and_of_the_report_holder(
    ledger_db: Database, crew_logs: Path
) -> None:
    cid, plan = _campaign(ledger_db, cases=60)  # 120 items
    crew = Crew(
        ledger_db, cid, crew_logs, evaluate_seconds=0.02, lease_seconds=1.5, report_seconds=1.5
    )
    crew.start(3)
    rng = random.Random(7)
    _wait_until(lambda: _succeeded(ledger_db, cid) >= 10)
    for _ in range(4):  # kill a worker mid-campaign, start a fresh one in its place
        crew.kill(rng.choice(crew.alive()))
        crew.start(1)
        time.sleep(0.6)

    def report_holder() -> str | None:
        with ledger_db.engine.connect() as connection:
            return connection.execute(
                sa.text(
                    "SELECT lease_owner FROM benchmark_campaign_report_state "
                    "WHERE campaign_id = :c AND status = 'leased'"
                ),
                {"c": cid},
            ).scalar_one_or_none()

    holder: list[str] = []
    _wait_until(lambda: bool(holder.append(report_holder() or "") or holder[-1]), timeout=90)
    crew.kill(holder[-1])  # the report's builder dies mid-build
    crew.wait()
    figures = crew.check(plan)  # type: ignore[arg-type]
    # The killed build cost the report no attempt (its lease was lost: one loss counted);
    # the one that finalized is attempt 1.
    assert (figures["report_attempts"], figures["report_lease_losses"]) == (1, 1)


def test_workers_ride_out_a_postgresql_restart(
    own_postgres: PostgresUnderTest, restartable_db: Database, crew_logs: Path
) -> None:
    cid, plan = _campaign(restartable_db, cases=100)  # 200 items
    crew = Crew(restartable_db, cid, crew_logs, evaluate_seconds=0.01, lease_seconds=5)
    crew.start(4)
    _wait_until(lambda: _succeeded(restartable_db, cid) >= 20)
    for _ in range(2):
        restartable_db.dispose()
        own_postgres.stop_immediately()
        time.sleep(2.0)  # the workers meet a refused connection meanwhile
        own_postgres.start()
        _wait_until(lambda: _succeeded(restartable_db, cid) >= 20, timeout=90)
        time.sleep(0.5)
    crew.wait()
    crew.check(plan)  # type: ignore[arg-type]
    assert set(crew.alive()) == set()


def test_workers_ride_out_terminated_sessions(
    own_postgres: PostgresUnderTest, restartable_db: Database, crew_logs: Path
) -> None:
    cid, plan = _campaign(restartable_db, cases=100)  # 200 items
    crew = Crew(restartable_db, cid, crew_logs, evaluate_seconds=0.01, lease_seconds=5)
    crew.start(4)
    _wait_until(lambda: _succeeded(restartable_db, cid) >= 10)
    admin = sa.create_engine(own_postgres.url, isolation_level="AUTOCOMMIT")
    terminated = 0
    try:
        for _ in range(8):
            with admin.connect() as connection:
                terminated += len(
                    connection.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :d AND pid <> pg_backend_pid()"
                        ),
                        {"d": restartable_db.engine.url.database},
                    ).all()
                )
            time.sleep(0.3)
    finally:
        admin.dispose()
    assert terminated > 0  # sessions really were cut
    crew.wait()
    crew.check(plan)  # type: ignore[arg-type]


def test_an_outside_lock_held_longer_than_the_lease(ledger_db: Database, crew_logs: Path) -> None:
    cid, plan = _campaign(ledger_db, cases=50)  # 100 items
    crew = Crew(ledger_db, cid, crew_logs, evaluate_seconds=0.01, lease_seconds=1.0)
    crew.start(3)
    _wait_until(lambda: _succeeded(ledger_db, cid) >= 10)
    lock = OutsideLock(ledger_db).start()  # the campaign tables' write lock
    before = _succeeded(ledger_db, cid)
    time.sleep(3.0)  # three leases long
    assert _succeeded(ledger_db, cid) == before  # nobody wrote while the lock was held
    lock.release()
    crew.wait()
    crew.check(plan)  # type: ignore[arg-type]


def test_campaign_work_rides_out_a_postgresql_restart(
    own_postgres: PostgresUnderTest, restartable_db: Database
) -> None:
    cid, _plan = _campaign(restartable_db, cases=100)  # 200 items, ~25 ms each
    command, env = _pool(restartable_db, cid, work_ms=25)
    pool = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_until(lambda: _succeeded(restartable_db, cid) >= 20)
        restartable_db.dispose()
        own_postgres.stop_immediately()
        time.sleep(2.0)
        own_postgres.start()
        _stdout, stderr = pool.communicate(timeout=150)
    finally:
        if pool.poll() is None:
            pool.kill()
    assert pool.returncode == 0, stderr.decode()[-2000:]
    if not restartable_db.transaction_pooling:
        assert b"database fault" in stderr  # the workers met the outage (and logged it)
    # Through PgBouncer a worker meets the restart only if a transaction of its was in
    # flight: the others' next statements wait in the pooler until the server is back.
    status = CampaignService(restartable_db).status(cid)
    assert status.counts["succeeded"] == 200
    assert status.report_finalization["status"] == "succeeded"


def test_workers_started_while_postgresql_is_down_wait_for_it(
    own_postgres: PostgresUnderTest, restartable_db: Database, crew_logs: Path
) -> None:
    """Library, asyncio and `campaign work` workers all start while the server is down,
    for longer than a library constructor's default budget: none exits, all work is done
    exactly once, the report finalized once."""
    cid, plan = _campaign(restartable_db, cases=60)  # 120 items
    restartable_db.dispose()
    own_postgres.stop_immediately()
    crew = Crew(restartable_db, cid, crew_logs, evaluate_seconds=0.01, lease_seconds=5)
    crew.start(2)
    crew.start_async(1)
    command, env = _pool(restartable_db, cid, work_ms=10)
    pool = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Every worker is up and meeting the outage; then longer than STARTUP_OUTAGE (a
        # library constructor's default): the workers' own budget keeps them waiting.
        _wait_until(lambda: sum(r["event"] == "start" for r in crew.records()) == 3)
        time.sleep(STARTUP_OUTAGE.budget_seconds + 4)
        assert pool.poll() is None, pool.communicate()[1].decode()[-2000:]
        assert set(crew.alive()) == set(crew.processes)
        own_postgres.start()
        _stdout, stderr = pool.communicate(timeout=150)
    finally:
        if pool.poll() is None:
            pool.kill()
    assert pool.returncode == 0, stderr.decode()[-2000:]
    assert b"database fault" in stderr  # it met the outage at start-up (and logged it)
    crew.wait()
    crew.check(plan, pool=True)  # type: ignore[arg-type]


def test_workers_started_during_a_storm_of_terminated_sessions_finish_the_work(
    own_postgres: PostgresUnderTest, restartable_db: Database, crew_logs: Path
) -> None:
    """Library, asyncio and `campaign work` workers start while every session of the
    database is being terminated again and again: none exits, all work is done exactly
    once, the report finalized once."""
    cid, plan = _campaign(restartable_db, cases=60)  # 120 items
    restartable_db.dispose()
    admin = sa.create_engine(own_postgres.url, isolation_level="AUTOCOMMIT")
    storming = threading.Event()
    storming.set()
    terminated: list[int] = []

    def storm() -> None:
        while storming.is_set():
            with admin.connect() as connection:
                terminated.append(
                    len(
                        connection.execute(
                            sa.text(
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = :d AND pid <> pg_backend_pid()"
                            ),
                            {"d": restartable_db.engine.url.database},
                        ).all()
                    )
                )
            time.sleep(0.15)

    stormer = threading.Thread(target=storm, daemon=True)
    stormer.start()
    crew = Crew(restartable_db, cid, crew_logs, evaluate_seconds=0.01, lease_seconds=5)
    command, env = _pool(restartable_db, cid, work_ms=10)
    pool = None
    try:
        crew.start(2)
        crew.start_async(1)
        pool = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait_until(lambda: sum(r["event"] == "start" for r in crew.records()) == 3)
        time.sleep(6)  # the workers start, and start over, under the storm
        # Nobody gave up: the pool still runs (or already finished all the work).
        assert pool.poll() in (None, 0), pool.communicate()[1].decode()[-2000:]
    finally:
        storming.clear()
        stormer.join(timeout=30)
        admin.dispose()
    assert sum(terminated) > 0  # sessions really were cut
    assert pool is not None
    _stdout, stderr = pool.communicate(timeout=150)
    assert pool.returncode == 0, stderr.decode()[-2000:]
    crew.wait()
    crew.check(plan, pool=True)  # type: ignore[arg-type]
