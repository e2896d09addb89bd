"""A campaign's report: its finalization state, the immutable report, and its lease.

:class:`ReportRepository` runs on the caller's session and never commits;
:class:`ReportLeases` is the report-finalization lease on the caller's
Connection (claim, renew, complete, fail), built from the same lease
transitions as a work item's (:mod:`benchledger.repositories.campaigns.leases`).
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import insert_if_absent
from benchledger.domain.campaign import REPORT_CLAIMABLE, ReportStatus
from benchledger.domain.campaign_codes import REPORT_LEASE_EXPIRED, REPORT_LEASE_LOSSES_SPENT
from benchledger.models.campaign import ReportRow, ReportStateRow
from benchledger.repositories.campaigns.leases import (
    RELEASED,
    LeaseRows,
    LeaseStatements,
    expired_values,
    leased_values,
    live_lease_params,
)
from benchledger.repositories.campaigns.work import ATTEMPTS_RANGE, has_unfinished

REPORTS = cast(sa.Table, ReportRow.__table__)
REPORT_STATE = cast(sa.Table, ReportStateRow.__table__)

REPORT_OUTCOME_COLUMNS = (
    REPORT_STATE.c.campaign_id,
    REPORT_STATE.c.status,
    REPORT_STATE.c.attempts,
    REPORT_STATE.c.max_attempts,
    REPORT_STATE.c.next_attempt_at,
    REPORT_STATE.c.last_error_code,
    REPORT_STATE.c.last_error_detail_hash,
)


class ReportRepository:
    """A campaign's report-finalization state and its immutable report (the report
    lease's writes are :class:`ReportLeases`)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def state(self, campaign_id: str, *, for_update: bool = False) -> sa.Row[Any] | None:
        """The report-finalization state; ``for_update`` locks the row (PostgreSQL).

        A writer that decides from the state (claim_report) locks it, so a
        concurrent claimer waits and then sees the lease, instead of losing the
        race in its ``UPDATE``. SQLite's write lock already serializes writers.
        """
        statement = sa.select(REPORT_STATE).where(REPORT_STATE.c.campaign_id == campaign_id)
        if for_update:
            statement = statement.with_for_update()
        return self.session.execute(statement).first()

    def insert_state(self, campaign_id: str, max_attempts: int, now: float) -> None:
        self.session.execute(
            sa.insert(REPORT_STATE).values(
                campaign_id=campaign_id,
                status=ReportStatus.PENDING.value,
                attempts=0,
                max_attempts=max_attempts,
                next_attempt_at=now,
                created_at=now,
                updated_at=now,
            )
        )

    def mark_succeeded_unless_leased(self, campaign_id: str, now: float) -> None:
        """A report stored outside a lease marks the state succeeded."""
        self.session.execute(
            sa.update(REPORT_STATE)
            .where(
                REPORT_STATE.c.campaign_id == campaign_id,
                REPORT_STATE.c.status != ReportStatus.LEASED.value,
                REPORT_STATE.c.status != ReportStatus.SUCCEEDED.value,
            )
            .values(
                status=ReportStatus.SUCCEEDED.value,
                attempts=sa.case((REPORT_STATE.c.attempts < 1, 1), else_=REPORT_STATE.c.attempts),
                next_attempt_at=now,
                last_error_code=None,
                last_error_detail_hash=None,
                updated_at=now,
                **RELEASED,
            )
        )

    def report(self, campaign_id: str) -> sa.Row[Any] | None:
        return self.session.execute(
            sa.select(REPORTS).where(REPORTS.c.campaign_id == campaign_id)
        ).first()

    def has_report(self, campaign_id: str) -> bool:
        return self.session.execute(HAS_REPORT, {"cid": campaign_id}).first() is not None

    def insert_report(
        self,
        campaign_id: str,
        policy_sha256: str,
        results_sha256: str,
        report_json: str,
        report_sha256: str,
        now: float,
    ) -> bool:
        return insert_if_absent(
            self.session,
            REPORTS,
            {
                "campaign_id": campaign_id,
                "policy_sha256": policy_sha256,
                "results_sha256": results_sha256,
                "report_json": report_json,
                "report_sha256": report_sha256,
                "created_at": now,
            },
        )


# -- the report lease on a Connection ------------------------------------------------------------

_CID: sa.BindParameter[Any] = sa.bindparam("cid")
REPORT_STATE_LOCKED = (
    sa.select(REPORT_STATE).where(REPORT_STATE.c.campaign_id == _CID).with_for_update()
)
EXPIRE_REPORT_LEASE = (
    sa.update(REPORT_STATE)
    .where(
        REPORT_STATE.c.campaign_id == _CID,
        REPORT_STATE.c.status == ReportStatus.LEASED.value,
        REPORT_STATE.c.lease_expires_at
        <= sa.bindparam("now", type_=REPORT_STATE.c.lease_expires_at.type),
    )
    .values(expired_values(REPORT_STATE, REPORT_LEASE_EXPIRED, REPORT_LEASE_LOSSES_SPENT))
)
LEASE_REPORT = (
    sa.update(REPORT_STATE)
    .where(
        REPORT_STATE.c.campaign_id == _CID,
        REPORT_STATE.c.status.in_(REPORT_CLAIMABLE),
        REPORT_STATE.c.next_attempt_at
        <= sa.bindparam("now", type_=REPORT_STATE.c.next_attempt_at.type),
        REPORT_STATE.c.attempts < REPORT_STATE.c.max_attempts,
    )
    .values(leased_values(REPORT_STATE))
    .returning(REPORT_STATE.c.attempts, REPORT_STATE.c.max_attempts)
)
HAS_REPORT = sa.select(sa.literal(1)).where(REPORTS.c.campaign_id == _CID)


class ReportLeases(LeaseRows):
    """The report-finalization lease on a Connection: claim, renew, complete, fail."""

    statements = LeaseStatements(
        REPORT_STATE,
        [REPORT_STATE.c.campaign_id == sa.bindparam("c_campaign_id")],
        REPORT_OUTCOME_COLUMNS,
        {
            "status": ReportStatus.SUCCEEDED.value,
            "next_attempt_at": sa.bindparam("now", type_=REPORT_STATE.c.next_attempt_at.type),
            "last_error_code": None,
            "last_error_detail_hash": None,
        },
    )

    def state_locked(self, campaign_id: str) -> sa.Row[Any] | None:
        """The report state, row-locked on PostgreSQL (SQLite's write lock is already held):
        a concurrent claimer waits here, then sees the lease."""
        return self.connection.execute(REPORT_STATE_LOCKED, {"cid": campaign_id}).first()

    def has_unfinished(self, campaign_id: str) -> bool:
        """Whether any item is not succeeded (through the ready index's status column)."""
        return has_unfinished(self.connection, campaign_id)

    def attempts_range(self, campaign_id: str) -> tuple[Any, Any]:
        row = self.connection.execute(ATTEMPTS_RANGE, {"cid": campaign_id}).one()
        return row[0], row[1]

    def expire_lease(self, campaign_id: str, now: float) -> bool:
        result = self.connection.execute(EXPIRE_REPORT_LEASE, {"cid": campaign_id, "now": now})
        return result.rowcount == 1

    def lease(
        self, campaign_id: str, now: float, owner: str, token: str, expires_at: float
    ) -> sa.Row[Any] | None:
        return self.connection.execute(
            LEASE_REPORT,
            {
                "cid": campaign_id,
                "now": now,
                "owner": owner,
                "token": token,
                "expires_at": expires_at,
            },
        ).first()

    def complete(self, claim: Any, now: float) -> sa.Row[Any] | None:
        """The claim's live report lease ends finalized."""
        return self.statements.complete(self.connection, live_lease_params(claim, now)).first()

    def has_report(self, campaign_id: str) -> bool:
        return self.connection.execute(HAS_REPORT, {"cid": campaign_id}).first() is not None
