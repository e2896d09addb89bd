"""Wake-ups instead of polling (PostgreSQL): an idle worker listens, and claims within
moments of new work, long before its poll interval."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.db.notify import WorkListener, open_listener
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.services.campaigns import CampaignService
from benchledger.workers.fleet import FleetWorker
from benchledger.workers.loop import Worker

from .helpers import make_plan, result_for

Heartbeat = Callable[[], None]
POLL = 30.0  # far longer than any wake-up may take


@pytest.fixture
def pg(ledger_db: Database, ledger_backend: str) -> Database:
    if ledger_backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY: PostgreSQL only (SQLite workers poll)")
    return ledger_db


def test_a_resumed_campaign_wakes_its_idle_worker(pg: Database) -> None:
    service = CampaignService(pg)
    plan = make_plan(cases=2)
    cid = service.create(plan.policy, plan.suite)
    service.set_limits(cid, max_concurrent_leases=0)  # paused: nothing can be claimed
    done = threading.Event()
    first: list[float] = []

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        first.append(time.monotonic())
        return result_for(claim)

    stop = threading.Event()
    worker = Worker(
        service,
        cid,
        "w-1",
        evaluate,
        until_finished=True,
        poll_seconds=POLL,
        should_stop=stop.is_set,
    )
    thread = threading.Thread(target=lambda: (worker.run(), done.set()))
    thread.start()
    try:
        time.sleep(1.0)  # the worker found nothing and waits
        assert not first
        lifted = time.monotonic()
        service.set_limits(cid, max_concurrent_leases=None)  # notifies
        assert done.wait(20), "the worker did not wake up"
    finally:
        stop.set()
        thread.join(timeout=POLL + 5)
    assert first and first[0] - lifted < 5.0
    assert service.status(cid).report_finalization["status"] == "succeeded"


def test_an_idle_fleet_picks_up_a_new_campaign_at_once(pg: Database) -> None:
    service = CampaignService(pg)
    seen: list[float] = []

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        seen.append(time.monotonic())
        return result_for(claim)

    stop = threading.Event()
    fleet = FleetWorker(
        service,
        "fleet-1",
        {"judge": evaluate},
        forever=True,
        poll_seconds=POLL,
        refresh_seconds=POLL,
        should_stop=stop.is_set,
    )
    thread = threading.Thread(target=fleet.run)
    thread.start()
    try:
        time.sleep(1.0)  # idle: no campaign
        plan = make_plan(cases=1)
        created = time.monotonic()
        cid = service.create(plan.policy, plan.suite, evaluator="judge")
        deadline = time.monotonic() + 20
        while service.status(cid).report_finalization["status"] != "succeeded":
            assert time.monotonic() < deadline, "the fleet did not pick the campaign up"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=POLL + 5)
    assert seen and seen[0] - created < 5.0


def test_no_listener_on_sqlite_or_through_transaction_pooling(
    ledger_db: Database, ledger_backend: str
) -> None:
    listener = open_listener(ledger_db)
    try:
        if ledger_backend in ("sqlite", "pgbouncer"):  # no LISTEN: these workers poll
            assert listener is None
        else:
            assert isinstance(listener, WorkListener)
            assert listener.wait(0.05) == set()
    finally:
        if listener is not None:
            listener.close()
