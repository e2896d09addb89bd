"""Workers ride out database faults: real lock timeouts, nothing charged to an item.

The faults are real: an outside connection holds the write lock while the
ledger's own connections wait only 100 ms for it (SQLite's busy timeout,
PostgreSQL's ``lock_timeout``), so every write the worker makes meanwhile fails
with the database's own "locked" / ``lock_not_available`` error.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import DATABASE_UNAVAILABLE, CampaignBlocked, LedgerError
from benchledger.faults import DatabaseUnavailable, Outage, OutagePolicy, is_transient
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.drivers import run_next_case, run_report_finalization
from benchledger.workers.loop import Worker
from helpers import OutsideLock

from .helpers import complete_all, make_plan, report_state, result_for, work_row

FAST = OutagePolicy(base_delay=0.02, max_delay=0.1)


def short_lock_waits(db: Database) -> None:
    """The ledger's connections wait at most 100 ms for a lock held elsewhere."""

    @event.listens_for(db.engine, "connect")
    def _short_waits(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        if db.dialect_name == "sqlite":
            cursor.execute("PRAGMA busy_timeout = 100")
        else:
            cursor.execute("SET lock_timeout = '100ms'")
            dbapi_connection.commit()
        cursor.close()

    db.engine.dispose()  # pooled connections are made again, with the short wait


@pytest.fixture
def faulty(ledger_db: Database) -> Database:
    short_lock_waits(ledger_db)
    return ledger_db


def test_a_lock_timeout_is_a_transient_fault_and_a_bad_statement_is_not(faulty: Database) -> None:
    with (
        OutsideLock(faulty),
        pytest.raises(sa.exc.OperationalError) as locked,
        faulty.write() as session,
    ):
        session.execute(sa.text("UPDATE benchmark_campaigns SET updated_at = updated_at"))
    assert is_transient(locked.value)
    with pytest.raises(sa.exc.DBAPIError) as bad, faulty.read() as session:
        session.execute(sa.text("SELECT * FROM no_such_table"))
    assert not is_transient(bad.value)
    assert not is_transient(LedgerError("benchmark.campaign.lease_lost"))
    assert not is_transient(ValueError("x"))


def test_a_refused_connection_is_transient_and_the_budget_ends_in_a_coded_error() -> None:
    db = Database("postgresql+psycopg://nobody@127.0.0.1:9/nothing?connect_timeout=2")
    outage = Outage(OutagePolicy(budget_seconds=0.3, base_delay=0.05, max_delay=0.1))
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        outage.call("a read", db.current_revision)
    assert caught.value.code == DATABASE_UNAVAILABLE
    assert "a read" in str(caught.value)
    assert outage.faults >= 2
    assert time.monotonic() - started < 10
    db.dispose()


def test_outage_policy_is_checked() -> None:
    for settings in (
        {"budget_seconds": 0},
        {"budget_seconds": -1},
        {"base_delay": float("nan")},
        {"max_delay": True},
        {"jitter": 2},
        {"jitter": "0.5"},
    ):
        with pytest.raises(LedgerError) as caught:
            OutagePolicy(**settings)
        assert caught.value.code == "ledger.input.outage_invalid"
    delays = [OutagePolicy(base_delay=1, max_delay=4, jitter=0).delay(n) for n in range(1, 6)]
    assert delays == [1, 2, 4, 4, 4]


def test_a_result_is_kept_through_a_lock_timeout_and_charges_nothing(
    faulty: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    outage = Outage(FAST)

    holders: list[OutsideLock] = []

    def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        holders.append(OutsideLock(faulty).start(release_after=0.8))
        heartbeat()  # meets the lock: logged, the live lease kept
        return result_for(claim)

    outcome = run_next_case(service, cid, "w-1", evaluate, clock, outage=outage)
    holders[0].release()
    assert outcome is not None and outcome.status == "succeeded"
    assert outage.faults >= 2  # the heartbeat and the first writes really met the lock
    row = work_row(faulty, outcome.work_id)
    assert (row.status, row.attempts, row.last_error_code) == ("succeeded", 1, None)


def test_past_the_outage_budget_the_worker_stops_with_a_code_and_charges_nothing(
    faulty: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claimed: list[ClaimedCase] = []

    def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        claimed.append(claim)
        return result_for(claim)

    worker = Worker(
        service,
        cid,
        "w-1",
        evaluate,
        clock=clock,
        outage=OutagePolicy(budget_seconds=0.5, base_delay=0.02, max_delay=0.1),
    )
    with OutsideLock(faulty), pytest.raises(DatabaseUnavailable) as caught:
        worker.run()
    assert caught.value.code == DATABASE_UNAVAILABLE
    assert claimed == []  # the claim itself met the lock: nothing leased, nothing run
    assert service.status(cid).counts["pending"] == 6


def test_a_write_that_meets_the_lock_after_evaluation_is_retried_until_the_budget(
    faulty: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    holders: list[OutsideLock] = []

    def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        holders.append(OutsideLock(faulty).start())
        return result_for(claim)

    outage = OutagePolicy(budget_seconds=0.5, base_delay=0.02, max_delay=0.1)
    try:
        with pytest.raises(DatabaseUnavailable):
            run_next_case(service, cid, "w-1", evaluate, clock, outage=outage)
    finally:
        holders[0].release()
    leased = [row for row in _rows(faulty) if row.status == "leased"]
    assert len(leased) == 1
    # Not charged: no failure recorded, the attempt is the claim's only.
    assert (leased[0].attempts, leased[0].last_error_code) == (1, None)


def test_a_lease_that_expires_during_the_fault_is_lost_not_failed(
    faulty: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    holders: list[OutsideLock] = []
    progress: list[Any] = []

    def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        if not holders:
            holders.append(OutsideLock(faulty).start(release_after=0.5))
            clock.advance(400)  # past the 300 s lease while the lock is held
        return result_for(claim)

    summary = Worker(
        service, cid, "w-1", evaluate, clock=clock, outage=FAST, progress=progress.append
    ).run()
    holders[0].release()
    assert summary.lost == 1
    assert progress[0].outcome is None and progress[0].lost == 1
    # Every item succeeded; the lost one was claimed again and no failure was ever recorded.
    assert service.status(cid).counts["succeeded"] == 6
    assert all(row.last_error_code is None for row in _rows(faulty))
    # The lost lease gave its attempt back: every item succeeded at attempt 1, and one
    # lease loss is counted.
    assert sorted(row.attempts for row in _rows(faulty)) == [1, 1, 1, 1, 1, 1]
    assert sorted(row.lease_losses for row in _rows(faulty)) == [0, 0, 0, 0, 0, 1]


class SlowReportBuilder(DefaultReportBuilder):
    """Takes ``seconds`` to build the report the first ``slow_builds`` times."""

    def __init__(self, seconds: float, lock_db: Database | None = None) -> None:
        super().__init__()
        self.seconds, self.builds = seconds, 0
        self.lock_db = lock_db
        self.holders: list[OutsideLock] = []

    def build(
        self, policy: CampaignPolicy, suite: Suite, results: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.builds += 1
        if self.builds == 1:
            if self.lock_db is not None:  # and the database is locked all the while
                self.holders.append(OutsideLock(self.lock_db).start(release_after=self.seconds))
            time.sleep(self.seconds)
        return super().build(policy, suite, results)  # type: ignore[arg-type]


def test_a_report_slower_than_its_lease_is_finalized_on_its_first_attempt(
    ledger_db: Database,
) -> None:
    builder = SlowReportBuilder(seconds=2.5)
    service = CampaignService(ledger_db, report_builder=builder)  # the real clock
    plan = make_plan(cases=2)
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    outcome = run_report_finalization(service, cid, "reporter", lease_seconds=1)
    assert outcome is not None and outcome.status == "succeeded"
    state = report_state(ledger_db, cid)
    assert (state.status, state.attempts, state.last_error_code) == ("succeeded", 1, None)
    assert service.load_report(cid)["locales"].keys() == {"de-DE", "fr-FR"}


def test_a_report_lease_lost_in_a_fault_is_counted_and_the_worker_finishes_the_report(
    faulty: Database,
) -> None:
    builder = SlowReportBuilder(seconds=2.0, lock_db=faulty)
    service = CampaignService(faulty, report_builder=builder)
    plan = make_plan(cases=2)
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    try:
        summary = Worker(
            service,
            cid,
            "reporter",
            lambda claim, heartbeat: result_for(claim),
            lease_seconds=1,
            until_finished=True,
            poll_seconds=0.2,
            outage=FAST,
        ).run()
    finally:
        for holder in builder.holders:
            holder.release()
    assert summary.lost_reports == 1
    assert summary.report is not None and summary.report.status == "succeeded"
    state = report_state(faulty, cid)
    # The lost report lease gave its attempt back; its loss is counted instead.
    assert (state.status, state.attempts, state.lease_losses) == ("succeeded", 1, 1)
    assert state.last_error_code in (None, dom.REPORT_LEASE_EXPIRED)
    service.load_report(cid)


def test_the_guard_keeps_a_lost_lease_code(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    complete_all(service, cid)
    for code in (dom.REPORT_LEASE_LOST, dom.LEASE_LOST):

        def lost(code: str = code) -> None:
            raise CampaignBlocked(code)

        with pytest.raises(CampaignBlocked) as caught:
            service.summarize(cid, operation_guard=lost)
        assert caught.value.code == code


def _rows(db: Database) -> list[Any]:
    with db.engine.connect() as connection:
        return list(connection.execute(sa.text("SELECT * FROM benchmark_campaign_work")))
