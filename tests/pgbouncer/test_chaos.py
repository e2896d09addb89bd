"""The chaos scenarios through PgBouncer, and PgBouncer itself crashing mid-campaign.

The scenarios of ``tests/chaos`` on the suite's server (``ledger_db``) run through
PgBouncer as that directory's ``[pgbouncer]`` runs. Those that stop, crash or cut
a server of their own (they take ``restartable_db``) are collected here again, so
they run with this directory's fixtures: the same test bodies, their workers and
``campaign work`` pools connecting through a transaction-pooling PgBouncer in front
of that server (``conftest.py``), with ``benchledger_pooler=transaction`` in every
URL they are given.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from chaos import test_chaos as _chaos
from chaos.helpers import MAX_ATTEMPTS, Crew, chaos_plan

from .helpers import PgBouncerUnderTest

pytestmark = pytest.mark.slow

#: The scenarios of tests/chaos that need a server of their own: collected here too.
OWN_SERVER = sorted(
    name
    for name, test in vars(_chaos).items()
    if name.startswith("test_") and "restartable_db" in inspect.signature(test).parameters
)
globals().update({name: getattr(_chaos, name) for name in OWN_SERVER})


def test_every_scenario_on_its_own_server_is_collected_here() -> None:
    """A fixture renamed in tests/chaos must not drop its scenarios from here silently."""
    own = {
        name
        for name, test in vars(_chaos).items()
        if name.startswith("test_") and "own_postgres" in inspect.signature(test).parameters
    }
    assert own and own <= set(OWN_SERVER), (own, OWN_SERVER)


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


def _wait_until(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_workers_ride_out_a_pgbouncer_crash(
    own_pgbouncer: PgBouncerUnderTest, restartable_db: Database, crew_logs: Path
) -> None:
    """PgBouncer is SIGKILLed twice mid-campaign (every client connection cut at once,
    transactions in flight lost) and started again: nothing lost, nothing completed
    twice, the report finalized once, no worker gave up."""
    plan = chaos_plan(100)  # 200 items
    cid = CampaignService(restartable_db).create(plan.policy, plan.suite, max_attempts=MAX_ATTEMPTS)
    crew = Crew(restartable_db, cid, crew_logs, evaluate_seconds=0.01, lease_seconds=5)
    crew.start(3)
    crew.start_async(1)
    _wait_until(lambda: _succeeded(restartable_db, cid) >= 20)
    for _ in range(2):
        restartable_db.dispose()
        own_pgbouncer.kill()
        time.sleep(1.5)  # the workers meet a refused connection meanwhile
        own_pgbouncer.start()
        # Work goes on through the new PgBouncer (or it was all done already).
        goal = min(_succeeded(restartable_db, cid) + 1, 200)
        _wait_until(lambda goal=goal: _succeeded(restartable_db, cid) >= goal, timeout=60)
    crew.wait()
    crew.check(plan)
    assert set(crew.alive()) == set()
