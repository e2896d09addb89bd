"""status() and health() say whether the last integrity audit is still current: when it
ran, and how many item outcomes were recorded since (an index range, never a scan)."""

from __future__ import annotations

from click.testing import CliRunner

from benchledger.cli import main
from benchledger.db import Database
from benchledger.domain.campaign_health import audit_current
from benchledger.repositories.campaigns.reads import CHANGES_SINCE
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

from .helpers import complete_all, execute, result_for


def _audit_fields(service: CampaignService, cid: str) -> tuple[object, ...]:
    status, health = service.status(cid), service.health(cid)
    fields = (status.verified_current, status.changes_since_verified)
    assert (health.verified_current, health.changes_since_verified) == fields
    if status.verified_at is not None:  # the payloads carry them with the audit's time
        assert status.as_payload()["verified_current"] == fields[0]
        assert health.as_payload()["changes_since_verified"] == fields[1]
    return fields


def test_never_audited_says_nothing(service: CampaignService, cid: str) -> None:
    assert _audit_fields(service, cid) == (None, None)
    assert "verified_current" not in service.status(cid).as_payload()


def test_item_outcomes_after_the_audit_are_counted(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    first = service.claim(cid, "w-1")
    assert first is not None
    service.complete(first, result_for(first))
    clock.advance(1)
    assert service.verify(cid).ok
    assert _audit_fields(service, cid) == (True, 0)
    clock.advance(1)
    for _ in range(2):  # two more outcomes: a success and a retryable failure
        claim = service.claim(cid, "w-1")
        assert claim is not None
        if _ == 0:
            service.complete(claim, result_for(claim))
        else:
            service.fail(claim, "test.flaky", retryable=True, delay_seconds=60)
    assert _audit_fields(service, cid) == (False, 2)
    clock.advance(1)
    assert service.verify(cid).ok  # a fresh audit covers them again
    assert _audit_fields(service, cid) == (True, 0)


def test_a_report_finalized_after_the_audit_is_a_change(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    complete_all(service, cid)
    clock.advance(1)
    assert service.verify(cid).ok
    assert _audit_fields(service, cid) == (True, 0)
    clock.advance(1)
    assert service.claim_report(cid, "w-1") is not None  # only the report state moves
    assert _audit_fields(service, cid) == (False, 0)


def test_a_campaign_row_written_after_the_audit_is_a_change(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    assert service.verify(cid).ok
    execute(ledger_db, "UPDATE benchmark_campaigns SET updated_at = :later", later=clock() + 1)
    assert _audit_fields(service, cid) == (False, 0)


def test_an_edit_behind_benchledgers_back_is_not_seen_until_the_next_audit(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    """The documented limit: only writes through benchledger move the markers."""
    complete_all(service, cid)
    clock.advance(1)
    assert service.verify(cid).ok
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = attempts + 1")
    assert _audit_fields(service, cid) == (True, 0)
    assert not service.verify(cid).ok
    assert service.status(cid).verified_ok is False


def test_the_rule() -> None:
    assert audit_current(10.0, 0, 9.0, None)
    assert audit_current(10.0, 0, 10.0, 10.0)
    assert not audit_current(10.0, 1, 9.0, 9.0)
    assert not audit_current(10.0, 0, 9.0, 10.5)
    assert not audit_current(10.0, 0, float("nan"), None)


def test_counting_is_an_index_range(ledger_db: Database, cid: str) -> None:
    """The count reads the attempt history's (campaign_id, finished_at) index only."""
    if ledger_db.engine.dialect.name != "sqlite":
        return  # the plan's wording is SQLite's; the index is the same on PostgreSQL
    with ledger_db.engine.connect() as connection:
        compiled = CHANGES_SINCE.compile(connection)
        rows = connection.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + str(compiled),
            tuple(compiled.construct_params({"cid": cid, "since": 0.0}).values()),
        ).all()
    plan = " ".join(str(row[-1]) for row in rows)
    assert "COVERING INDEX benchmark_campaign_attempts_finished" in plan, plan


def test_campaign_status_and_health_print_it(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    def printed(*args: str) -> str:
        result = CliRunner().invoke(
            main, ["--url", ledger_db.url, "campaign", *args, cid], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        return " ".join(result.stdout.split())

    assert service.verify(cid).ok
    assert "nothing changed since" in printed("status")
    clock.advance(1)
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.complete(claim, result_for(claim))
    for command in ("status", "health"):
        assert "not verified since 1 items changed" in printed(command)
