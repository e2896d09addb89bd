"""PostgreSQL: a large campaign's create() refreshes the planner's statistics of the items.

Until ANALYZE samples a new campaign the planner takes it for one row, and a
claim's sweep of expired leases may read every item of the campaign.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.repositories.campaigns import work as work_repo
from benchledger.services.campaigns import CampaignService, creation

from .helpers import make_plan


@pytest.fixture
def pg(ledger_db: Database) -> Database:
    if ledger_db.dialect_name != "postgresql":
        pytest.skip("PostgreSQL's planner statistics")
    return ledger_db


def _analyze_count(db: Database) -> int:
    with db.engine.connect() as connection:  # a new transaction: a fresh stats snapshot
        return int(
            connection.exec_driver_sql(
                "SELECT analyze_count FROM pg_stat_user_tables"
                " WHERE relname = 'benchmark_campaign_work'"
            ).scalar_one()
        )


def _estimated_rows(db: Database, campaign_id: str) -> int:
    with db.engine.connect() as connection:
        plan = connection.execute(
            sa.text(
                "EXPLAIN (FORMAT JSON) SELECT 1 FROM benchmark_campaign_work"
                " WHERE campaign_id = :cid"
            ),
            {"cid": campaign_id},
        ).scalar_one()
    return int(plan[0]["Plan"]["Plan Rows"])


def test_a_large_campaign_is_known_to_the_planner_once_created(
    pg: Database, service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(creation, "ANALYZE_FROM_ITEMS", 40)
    before = _analyze_count(pg)
    plan = make_plan(cases=20)  # 40 items
    cid = service.create(plan.policy, plan.suite)
    assert _analyze_count(pg) == before + 1
    assert _estimated_rows(pg, cid) == 40
    service.create(plan.policy, plan.suite)  # idempotent: nothing inserted, no ANALYZE
    assert _analyze_count(pg) == before + 1


def test_a_small_campaign_leaves_the_statistics_to_autovacuum(
    pg: Database, service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(creation, "ANALYZE_FROM_ITEMS", 41)
    before = _analyze_count(pg)
    plan = make_plan(cases=20)  # 40 items
    service.create(plan.policy, plan.suite)
    assert _analyze_count(pg) == before


@pytest.fixture
def vacuum_lock(pg: Database) -> Iterator[None]:
    """Another session holds the lock ANALYZE needs (as a running VACUUM does)."""
    outside = sa.create_engine(pg.engine.url, poolclass=sa.pool.NullPool)
    with outside.connect() as connection, connection.begin():
        connection.exec_driver_sql(
            "LOCK TABLE benchmark_campaign_work IN SHARE UPDATE EXCLUSIVE MODE"
        )
        yield
    outside.dispose()


def test_a_campaign_is_created_when_its_statistics_cannot_be_refreshed(
    pg: Database,
    service: CampaignService,
    vacuum_lock: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(creation, "ANALYZE_FROM_ITEMS", 40)
    monkeypatch.setattr(work_repo, "ANALYZE_LOCK_TIMEOUT", "100ms")
    before = _analyze_count(pg)
    plan = make_plan(cases=20)
    with caplog.at_level(logging.WARNING, logger="benchledger.campaigns"):
        cid = service.create(plan.policy, plan.suite)
    assert service.status(cid).work_count == 40
    assert service.claim(cid, "w-1") is not None  # and it works
    assert _analyze_count(pg) == before
    assert [r.getMessage() for r in caplog.records] == [
        f"campaign {cid}: the planner's statistics were not refreshed (LockNotAvailable); "
        "its first claims may be slow until autovacuum analyzes the table"
    ]
