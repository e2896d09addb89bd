"""Cost: claim, renew, complete and fail reach only indexed rows, whatever the campaign size."""

from __future__ import annotations

from typing import Any

import pytest

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import StatementLog, query_plans

from .helpers import make_plan, result_for


def one_cycle(
    statements: StatementLog, service: CampaignService, cid: str, clock: LedgerClock
) -> dict[str, int]:
    """Statements per call for one claim/renew/fail/claim/complete cycle (one expired lease)."""
    db = service.db
    counts = {}
    with statements(db) as seen:
        claim = service.claim(cid, "w-1", lease_seconds=10)
    counts["claim"] = len(seen)
    assert claim is not None
    with statements(db) as seen:
        claim = service.renew(claim, lease_seconds=10)
    counts["renew"] = len(seen)
    with statements(db) as seen:
        service.fail(claim, "a.b")
    counts["fail"] = len(seen)
    stale = service.claim(cid, "w-1", lease_seconds=10)
    assert stale is not None
    clock.advance(10)
    with statements(db) as seen:
        claim = service.claim(cid, "w-2", lease_seconds=10)  # sweeps the stale lease
    counts["claim_and_sweep"] = len(seen)
    assert claim is not None
    with statements(db) as seen:
        service.complete(claim, result_for(claim))
    counts["complete"] = len(seen)
    return counts


def test_statements_per_call_do_not_grow_with_the_campaign(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, statements: StatementLog
) -> None:
    small = make_plan(cases=2, locales=("de-DE",))
    large = make_plan(cases=250, locales=("de-DE", "fr-FR", "ja-JP", "pt-BR"))
    small_id = service.create(small.policy, small.suite)
    large_id = service.create(large.policy, large.suite)
    # Most of the large campaign is finished: the claim must not walk those rows.
    while (
        claim := service.claim(large_id, "w-0")
    ) is not None and claim.suite_case_key < "case-0240":
        service.complete(claim, result_for(claim))
    assert claim is not None
    service.fail(claim, "a.b")
    assert one_cycle(statements, service, small_id, clock) == one_cycle(
        statements, service, large_id, clock
    )


def _work_plans(db: Database, seen: list[tuple[str, Any]], *, keep: str = "UPDATE") -> list[str]:
    """The plans of the captured statements on the work table containing ``keep``."""
    return query_plans(
        db, seen, lambda statement: keep in statement and "benchmark_campaign_work" in statement
    )


def test_claim_walks_the_claimable_index_in_order(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, statements: StatementLog
) -> None:
    plan = make_plan(cases=50, locales=("de-DE", "fr-FR"))
    cid = service.create(plan.policy, plan.suite)
    with statements(ledger_db) as seen:
        assert service.claim(cid, "w-1") is not None
    updates = [statement for statement, _ in seen if statement.lstrip().startswith("WITH")]
    # One statement: the sweep of expired leases and the lease of the next item.
    assert len(updates) == 1
    if ledger_db.dialect_name == "postgresql":
        assert updates[0].count("FOR UPDATE SKIP LOCKED") == 2
    (plan_text,) = _work_plans(ledger_db, seen)
    assert "benchmark_campaign_leases" in plan_text
    assert "benchmark_campaign_claimable" in plan_text
    # Both through their index: never a scan of the campaign's rows.
    assert "SCAN benchmark_campaign_work" not in plan_text
    assert "Seq Scan on benchmark_campaign_work" not in plan_text


def test_next_due_at_is_a_seek_per_status(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, statements: StatementLog
) -> None:
    plan = make_plan(cases=50, locales=("de-DE", "fr-FR"))
    cid = service.create(plan.policy, plan.suite)
    for _ in range(3):
        claim = service.claim(cid, "w-1")
        assert claim is not None
        service.fail(claim, "a.b", delay_seconds=10)
    with statements(ledger_db) as seen:
        assert service.status(cid).next_due_at is not None
    (due,) = _work_plans(ledger_db, seen, keep="lease_expires_at")
    # One MIN per status, each through an index: the ready index (pending, retry_wait),
    # the leases index (leased); never a scan of the campaign's rows.
    *seeks, throttled = due.split("InitPlan") if "InitPlan" in due else (due, "")
    seeks_text = "".join(seeks)
    if ledger_db.dialect_name == "postgresql":
        assert seeks_text.count("benchmark_campaign_ready") == 2
        assert seeks_text.count("benchmark_campaign_leases") == 1
        # The first throttled item: the ready index in due order, or the errors index
        # (only items with an error code), as the planner prefers; never the campaign.
        assert "benchmark_campaign_ready" in throttled or "benchmark_campaign_errors" in throttled
        assert "TEMP B-TREE" not in seeks_text and "Sort" not in seeks_text
    else:
        assert due.count("benchmark_campaign_ready") == 3
        assert due.count("benchmark_campaign_leases") == 1
        assert "TEMP B-TREE" not in due and "Sort" not in due
    assert "SCAN benchmark_campaign_work" not in due and "Seq Scan" not in due
    # The index yields the earliest first: no aggregate over the rows.
    assert "Aggregate" not in due


@pytest.mark.parametrize("method", ["renew", "complete", "fail"])
def test_lease_holder_calls_are_one_update_by_key(
    ledger_db: Database, service: CampaignService, cid: str, method: str, statements: StatementLog
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    calls = {
        "renew": lambda: service.renew(claim),
        "complete": lambda: service.complete(claim, result_for(claim)),
        "fail": lambda: service.fail(claim, "a.b"),
    }
    with statements(ledger_db) as seen:
        calls[method]()
    history = [s for s, _ in seen if "benchmark_campaign_attempts" in s]
    work_statements = [s for s in (s for s, _ in seen) if "benchmark_campaign_work" in s]
    # An attempt that ends adds its one row to the history, in the same transaction;
    # a renewal ends nothing. On PostgreSQL a completion is one statement for both (the
    # UPDATE a data-modifying CTE whose row feeds the INSERT).
    if ledger_db.dialect_name == "postgresql" and method == "complete":
        assert work_statements == history and len(history) == 1
        statement = history[0].lstrip()
        assert (
            statement.startswith("WITH done AS") and "UPDATE benchmark_campaign_work" in statement
        )
        assert "INSERT INTO benchmark_campaign_attempts" in statement
        return
    work_statements = [s for s in work_statements if s not in history]
    assert len(work_statements) == 1
    assert work_statements[0].lstrip().startswith("UPDATE")
    assert "work_id" in work_statements[0].split("WHERE", 1)[1]
    assert len(history) == (0 if method == "renew" else 1)
    if history:
        assert history[0].lstrip().startswith("INSERT INTO benchmark_campaign_attempts")
        assert "work_id" in history[0].split("WHERE", 1)[1]


def test_reads_use_read_transactions(
    ledger_db: Database, service: CampaignService, cid: str, statements: StatementLog
) -> None:
    with statements(ledger_db) as seen:
        service.status(cid)
        service.health(cid)
    assert not any("BEGIN IMMEDIATE" in statement for statement, _ in seen)
    assert not any(
        statement.lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE"))
        for statement, _ in seen
    )


def test_a_results_page_reads_the_items_in_order_without_sorting_the_campaign(
    ledger_db: Database, service: CampaignService, statements: StatementLog
) -> None:
    """A page deep in a campaign costs what the first does: the items are read in
    code-point order from an index (the unique one on SQLite, the "C"-collated one of
    revision 0011 on PostgreSQL), never sorted whole."""
    plan = make_plan(cases=50, locales=("de-DE", "fr-FR"))
    cid = service.create(plan.policy, plan.suite)
    first = service.results(cid, limit=10)
    with statements(ledger_db) as seen:
        service.results(cid, cursor=first.next_cursor, limit=10)
    (page,) = query_plans(
        ledger_db,
        seen,
        lambda s: s.lstrip().startswith("SELECT") and "ORDER BY" in s and "LIMIT" in s,
    )
    if ledger_db.dialect_name == "postgresql":
        assert "benchmark_campaign_items_in_order" in page, page
        assert "Sort" not in page, page
    else:
        assert "TEMP B-TREE" not in page, page


def test_an_export_reads_the_campaign_once_through_one_cursor(
    ledger_db: Database, service: CampaignService, statements: StatementLog
) -> None:
    """iter_results streams: one statement over the items (read a batch at a time) and
    one history statement per batch, whatever the campaign's size."""
    from benchledger.services.campaigns import results

    plan = make_plan(cases=50, locales=("de-DE", "fr-FR"))  # 100 items
    cid = service.create(plan.policy, plan.suite)
    with statements(ledger_db) as seen:
        items = list(results.iter_results(service.context, cid, page_size=30))
    assert len(items) == 100
    reads = [s for s, _ in seen if s.lstrip().startswith("SELECT")]
    item_reads = [s for s in reads if "FROM benchmark_campaign_work" in s and "ORDER BY" in s]
    history = [s for s in reads if "FROM benchmark_campaign_attempts" in s]
    assert len(item_reads) == 1 and len(history) == 4, reads
