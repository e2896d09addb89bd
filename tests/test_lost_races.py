"""Lost races happen for real on PostgreSQL, and ``db.retry_lost_races`` retries them.

SQLite admits one writer at a time: no transaction there ever loses a race, so a
retry that never retries would pass every SQLite test. Here N threads, each with
a database of its own, create the same campaign; an engine hook holds every
thread's first ``INSERT INTO benchmark_campaigns`` until all of them have read
that the campaign does not exist yet. One insert wins; every other one meets a
unique violation, and must run its transaction again (which finds the winner's
campaign and verifies it) instead of failing.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from benchledger.db import Database
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.services.campaigns import CampaignService
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory

RACERS = 4


def _plan() -> CampaignPlan:
    suite = SuiteFactory(cases=[SuiteCaseFactory(key=f"race-{i}") for i in range(3)])
    return CampaignPlan(CampaignPolicyFactory(suite=suite, required_locales=("de-DE",)), suite)


def test_concurrent_creates_of_one_campaign_lose_races_and_retry(
    ledger_db: Database, ledger_backend: str
) -> None:
    if ledger_backend != "postgresql":
        pytest.skip("SQLite admits one writer at a time: no race is ever lost there")
    plan = _plan()
    everyone_read = threading.Barrier(RACERS, timeout=30)
    violations: list[str] = []
    lock = threading.Lock()

    def racer(index: int) -> str:
        db = Database(ledger_db.url)
        held = False

        @event.listens_for(db.engine, "before_cursor_execute")
        def _hold(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            nonlocal held
            if not held and statement.lstrip().upper().startswith(
                "INSERT INTO BENCHMARK_CAMPAIGNS "
            ):
                held = True
                everyone_read.wait()  # every racer has read "no such campaign"

        @event.listens_for(db.engine, "handle_error")
        def _seen(context: Any) -> None:
            if isinstance(context.sqlalchemy_exception, sa.exc.IntegrityError):
                with lock:
                    violations.append(f"racer {index}")

        try:
            return CampaignService(db).create(plan.policy, plan.suite, max_attempts=3)
        finally:
            db.dispose()

    with ThreadPoolExecutor(RACERS) as pool:
        ids = list(pool.map(racer, range(RACERS)))
    assert ids == [plan.campaign_id] * RACERS  # every racer got the campaign
    assert len(violations) == RACERS - 1, violations  # the races really were lost
    status = CampaignService(ledger_db).status(plan.campaign_id)
    assert status.work_count == 3  # created once
