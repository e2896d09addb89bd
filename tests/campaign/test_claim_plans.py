"""PostgreSQL: a claim runs on the plan its prepared statement made once.

PostgreSQL plans a prepared statement anew on every execution while its one plan
for any values looks dearer than the plans for the values given; the claim's
always did, and the planning cost more of the server's time than the claim itself.
"""

from __future__ import annotations

import secrets

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.repositories.campaigns.leases import WorkLeases
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

from .helpers import make_plan

#: psycopg prepares a statement at its fifth execution; the later ones run prepared.
CLAIMS = 10


def _prepared(db: Database) -> bool:
    with db.engine.connect() as connection:
        driver = connection.connection.driver_connection
        return getattr(driver, "prepare_threshold", None) is not None


def _claim_plans(connection: sa.Connection) -> list[tuple[int, int]]:
    """(generic, custom) plans made for this session's prepared claim statements."""
    rows = connection.exec_driver_sql(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement LIKE 'WITH next_claimable%%'"
    ).all()
    return [(int(generic), int(custom)) for generic, custom in rows]


@pytest.mark.parametrize("n", [1, 3], ids=["single", "batched"])
def test_claims_are_planned_once_not_per_execution(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, n: int
) -> None:
    if ledger_db.dialect_name != "postgresql" or not _prepared(ledger_db):
        pytest.skip("PostgreSQL's prepared statements (none through PgBouncer's pooling)")
    plan = make_plan(cases=CLAIMS * n)
    cid = service.create(plan.policy, plan.suite)
    now = clock()
    token = secrets.token_urlsafe(16)
    with ledger_db.engine.connect() as connection:
        for _ in range(CLAIMS):
            with connection.begin():
                work = WorkLeases(connection)
                if n == 1:
                    row, _ = work.claim(cid, now, "w", token, now + 60)
                    leased = [] if row is None else [row]
                else:
                    leased, _ = work.claim_batch(cid, now, "w", token, now + 60, n)
                assert len(leased) == n
        with connection.begin():
            plans = _claim_plans(connection)
    # The executions after the fifth ran prepared, each on the one generic plan.
    assert plans == [(CLAIMS - 5, 0)]
