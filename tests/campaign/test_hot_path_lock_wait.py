"""Leases are dated after the lock wait: a claim that queued behind another writer never
hands out a lease that is already (nearly) expired.

An outside transaction on its own connection holds the lock a claim needs (SQLite:
``BEGIN IMMEDIATE``; PostgreSQL: the work table's, or the report state row's) for
longer than the lease; the claim waits for it, and the lease it returns runs from
the moment the lock was released, on the real clock.
"""

from __future__ import annotations

import time

import pytest

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from helpers import OutsideLock

from .helpers import complete_all, make_plan, result_for, work_row

HOLD_SECONDS = 1.2
LEASE_SECONDS = 1.0
WORK_LOCK = "LOCK TABLE benchmark_campaign_work IN EXCLUSIVE MODE"
REPORT_STATE_LOCK = "SELECT * FROM benchmark_campaign_report_state FOR UPDATE"


def _held_for_longer_than_a_lease(db: Database, postgres_sql: str) -> OutsideLock:
    """An outside transaction holding the lock (PostgreSQL: ``postgres_sql``) that lets
    go by itself ``HOLD_SECONDS`` later; ``released_at`` is when."""
    return OutsideLock(db, postgres_sql).start(release_after=HOLD_SECONDS)


@pytest.fixture
def real_clock_service(ledger_db: Database) -> CampaignService:
    return CampaignService(ledger_db)  # time.time: the wait is real


def test_a_claim_that_waited_for_the_lock_gets_a_full_lease(
    ledger_db: Database, real_clock_service: CampaignService
) -> None:
    service = real_clock_service
    plan = make_plan(cases=2)
    cid = service.create(plan.policy, plan.suite)
    with _held_for_longer_than_a_lease(ledger_db, WORK_LOCK) as lock:
        asked_at = time.time()
        claim = service.claim(cid, "w-1", lease_seconds=LEASE_SECONDS)
    returned_at = time.time()
    assert claim is not None
    assert returned_at - asked_at >= HOLD_SECONDS * 0.9  # it did wait for the lock
    # Dated after the wait: the lease runs from when the lock was let go, not from the call.
    assert claim.lease_expires_at >= lock.released_at + LEASE_SECONDS - 0.05
    assert claim.lease_expires_at > returned_at
    row = work_row(ledger_db, claim.work_id)
    assert row.lease_expires_at == claim.lease_expires_at and row.attempts == 1
    # Still live: the holder can complete it, its attempt was not spent on the wait.
    outcome = service.complete(claim, result_for(claim))
    assert (outcome.status, outcome.attempt) == ("succeeded", 1)


def test_a_report_claim_that_waited_for_the_lock_gets_a_full_lease(
    ledger_db: Database, real_clock_service: CampaignService
) -> None:
    service = real_clock_service
    plan = make_plan(cases=1)
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    with _held_for_longer_than_a_lease(ledger_db, REPORT_STATE_LOCK) as lock:
        asked_at = time.time()
        claim = service.claim_report(cid, "reporter", lease_seconds=LEASE_SECONDS)
    returned_at = time.time()
    assert claim is not None and claim.attempt == 1
    assert returned_at - asked_at >= HOLD_SECONDS * 0.9
    assert claim.lease_expires_at >= lock.released_at + LEASE_SECONDS - 0.05
    assert claim.lease_expires_at > returned_at
    service.summarize(cid)  # the report, stored under the live lease
    assert service.complete_report(claim).status == "succeeded"


def test_an_explicit_now_is_kept_as_given(
    ledger_db: Database, real_clock_service: CampaignService
) -> None:
    """A caller that passes ``now`` chose the time: the lock wait does not move it."""
    service = real_clock_service
    plan = make_plan(cases=1)
    cid = service.create(plan.policy, plan.suite)
    given = time.time()
    with _held_for_longer_than_a_lease(ledger_db, WORK_LOCK):
        claim = service.claim(cid, "w-1", now=given, lease_seconds=60)
    assert claim is not None and claim.lease_expires_at == given + 60
