"""The SQL of operators' campaign actions.

Find by id prefix, retry, cancel/resume, caps, delete, registration. (The
claim's gate, which reads what these actions set, is the claim's own:
:mod:`benchledger.repositories.campaigns.leases`.)

Like every repository, these run on the caller's session and never commit.
Each write is fenced: it changes only rows still in the state the action
applies to (a compare-and-set ``WHERE``), so a worker's concurrent write is
never overwritten, and the service refuses the action (rolling back) when
nothing matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

import benchledger.models  # noqa: F401  (every table on Base.metadata)
from benchledger.domain.campaign import ReportStatus, WorkStatus
from benchledger.models.base import Base
from benchledger.repositories.campaigns.gate import CLAIMS, CONTROL_COLUMNS, RATE_WINDOW_SECONDS
from benchledger.repositories.campaigns.leases import RELEASED
from benchledger.repositories.campaigns.predicates import LEASED_WORK
from benchledger.repositories.campaigns.reports import REPORT_STATE, REPORTS
from benchledger.repositories.campaigns.store import CAMPAIGNS, POLICIES, SUITES
from benchledger.repositories.campaigns.work import WORK

_CID = sa.bindparam("campaign_id", type_=sa.Text())
_NOW: sa.BindParameter[float] = sa.bindparam("now", type_=sa.Double())
_SINCE: sa.BindParameter[float] = sa.bindparam("since", type_=sa.Double())
LIVE_LEASES = (
    sa.select(sa.func.count())
    .select_from(WORK)
    .where(WORK.c.campaign_id == _CID, LEASED_WORK, WORK.c.lease_expires_at > _NOW)
)
RECENT_CLAIMS = (
    sa.select(sa.func.count())
    .select_from(CLAIMS)
    .where(CLAIMS.c.campaign_id == _CID, CLAIMS.c.claimed_at > _SINCE)
)


def _campaign_tables() -> list[sa.Table]:
    """Every table with a foreign key to ``benchmark_campaigns``, dependents first."""
    found = [
        table
        for table in Base.metadata.sorted_tables
        if any(key.column.table is CAMPAIGNS for key in table.foreign_keys)
    ]
    return list(reversed(found))


def _rearmed(table: sa.Table, remaining: int, now: float) -> dict[str, Any]:
    """A failed row given ``remaining`` more attempts (its attempt count set back).

    With as many attempts left as its maximum it is ``pending`` as if new (no
    error); otherwise it is ``retry_wait``, due now, keeping its last error.
    """
    c = table.c
    fresh = c.max_attempts <= remaining
    return {
        # The same two states for an item (WorkStatus) and the report (ReportStatus).
        "status": sa.case((fresh, WorkStatus.PENDING.value), else_=WorkStatus.RETRY_WAIT.value),
        "attempts": sa.case((fresh, 0), else_=c.max_attempts - remaining),
        "last_error_code": sa.case((fresh, None), else_=c.last_error_code),
        "last_error_detail_hash": sa.case((fresh, None), else_=c.last_error_detail_hash),
        "next_attempt_at": now,
        "updated_at": now,
        **RELEASED,
    }


class CampaignActionRepository:
    """Rows an operator's action reads or changes."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # -- finding campaigns ---------------------------------------------------------------

    def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        """Up to ``limit`` campaign ids starting with ``prefix`` (in id order)."""
        rows = self.session.execute(
            sa.select(CAMPAIGNS.c.campaign_id)
            .where(sa.func.substr(CAMPAIGNS.c.campaign_id, 1, len(prefix)) == prefix)
            .order_by(CAMPAIGNS.c.campaign_id)
            .limit(limit)
        )
        return [str(row[0]) for row in rows]

    def unregistered(self) -> list[str]:
        """Campaigns (oldest first) whose policy or suite is not stored: legacy ones."""
        rows = self.session.execute(
            sa.select(CAMPAIGNS.c.campaign_id)
            .outerjoin(POLICIES, POLICIES.c.policy_sha256 == CAMPAIGNS.c.policy_sha256)
            .outerjoin(SUITES, SUITES.c.suite_sha256 == CAMPAIGNS.c.suite_sha256)
            .where(sa.or_(POLICIES.c.policy_sha256.is_(None), SUITES.c.suite_sha256.is_(None)))
            .order_by(CAMPAIGNS.c.created_at, CAMPAIGNS.c.campaign_id)
        )
        return [str(row[0]) for row in rows]

    def table_counts(self) -> dict[str, int]:
        """Rows per campaign table (what a legacy file holds)."""
        counts = {}
        for table in (CAMPAIGNS, WORK, REPORTS):
            counts[table.name] = int(
                self.session.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            )
        return counts

    # -- locking -------------------------------------------------------------------------

    def lock(self, campaign_id: str) -> bool:
        """Lock the campaign's work rows, then its row (PostgreSQL; SQLite's write lock
        already excludes other writers). A claim in flight finishes first; later claims
        skip the locked rows. The order (work rows, then the campaign row) is the claim's
        own, so the two never deadlock. ``False`` when the campaign does not exist."""
        self.session.execute(
            sa.select(WORK.c.work_id).where(WORK.c.campaign_id == campaign_id).with_for_update()
        ).all()
        found = self.session.execute(
            sa.select(CAMPAIGNS.c.campaign_id)
            .where(CAMPAIGNS.c.campaign_id == campaign_id)
            .with_for_update()
        ).first()
        return found is not None

    # -- cancel, resume, caps ------------------------------------------------------------

    def controls(self, campaign_id: str) -> Any:
        return self.session.execute(
            sa.select(CAMPAIGNS.c.campaign_id, *CONTROL_COLUMNS).where(
                CAMPAIGNS.c.campaign_id == campaign_id
            )
        ).first()

    def set_cancelled(self, campaign_id: str, cancelled_at: float | None) -> bool:
        """Cancel (a time) or resume (``None``); fenced: only a change of state matches."""
        was = (
            CAMPAIGNS.c.cancelled_at.is_(None)
            if cancelled_at is not None
            else CAMPAIGNS.c.cancelled_at.is_not(None)
        )
        result = self.session.execute(
            sa.update(CAMPAIGNS)
            .where(CAMPAIGNS.c.campaign_id == campaign_id, was)
            .values(cancelled_at=cancelled_at)
        )
        return cast(sa.CursorResult[Any], result).rowcount == 1

    def set_caps(self, campaign_id: str, values: dict[str, int | None]) -> bool:
        result = self.session.execute(
            sa.update(CAMPAIGNS).where(CAMPAIGNS.c.campaign_id == campaign_id).values(**values)
        )
        return cast(sa.CursorResult[Any], result).rowcount == 1

    def report_status(self, campaign_id: str) -> str | None:
        return self.session.execute(
            sa.select(REPORT_STATE.c.status).where(REPORT_STATE.c.campaign_id == campaign_id)
        ).scalar_one_or_none()

    def flow(self, campaign_id: str, now: float) -> tuple[int, int]:
        """Live leases now, and claims logged in the last minute."""
        live = self.session.execute(LIVE_LEASES, {"campaign_id": campaign_id, "now": now})
        recent = self.session.execute(
            RECENT_CLAIMS, {"campaign_id": campaign_id, "since": now - RATE_WINDOW_SECONDS}
        )
        return int(live.scalar_one()), int(recent.scalar_one())

    def live_leases(self, campaign_id: str, now: float) -> int:
        """Leases not yet expired: work items and the report."""
        items = self.session.execute(
            sa.select(sa.func.count()).where(
                WORK.c.campaign_id == campaign_id,
                WORK.c.status == WorkStatus.LEASED.value,
                WORK.c.lease_expires_at > now,
            )
        ).scalar_one()
        report = self.session.execute(
            sa.select(sa.func.count()).where(
                REPORT_STATE.c.campaign_id == campaign_id,
                REPORT_STATE.c.status == ReportStatus.LEASED.value,
                REPORT_STATE.c.lease_expires_at > now,
            )
        ).scalar_one()
        return int(items) + int(report)

    # -- retry ---------------------------------------------------------------------------

    def retry_items(
        self,
        campaign_id: str,
        now: float,
        remaining: int,
        *,
        codes: Sequence[str] = (),
        work_ids: Sequence[str] = (),
    ) -> list[str]:
        """Re-arm failed items (all, or those with one of ``codes``, or ``work_ids``)."""
        conditions: list[sa.ColumnElement[bool]] = [
            WORK.c.campaign_id == campaign_id,
            WORK.c.status == WorkStatus.FAILED.value,
        ]
        if codes:
            conditions.append(WORK.c.last_error_code.in_(list(codes)))
        if work_ids:
            conditions.append(WORK.c.work_id.in_(list(work_ids)))
        rows = self.session.execute(
            sa.update(WORK)
            .where(*conditions)
            .values(_rearmed(WORK, remaining, now))
            .returning(WORK.c.work_id)
        ).all()
        return sorted(str(row[0]) for row in rows)

    def existing_work_ids(self, campaign_id: str, work_ids: Sequence[str]) -> set[str]:
        rows = self.session.execute(
            sa.select(WORK.c.work_id).where(
                WORK.c.campaign_id == campaign_id, WORK.c.work_id.in_(list(work_ids))
            )
        )
        return {str(row[0]) for row in rows}

    def failed_codes(self, campaign_id: str) -> set[str]:
        """The last error codes of the campaign's failed items and failed report."""
        items = self.session.execute(
            sa.select(WORK.c.last_error_code)
            .where(
                WORK.c.campaign_id == campaign_id,
                WORK.c.status == WorkStatus.FAILED.value,
                WORK.c.last_error_code.is_not(None),
            )
            .distinct()
        ).scalars()
        codes = {str(code) for code in items}
        report = self.failed_report_code(campaign_id)
        return codes if report is None else codes | {report}

    def failed_report_code(self, campaign_id: str) -> str | None:
        """The last error of a failed report finalization; ``None`` unless it failed."""
        code = self.session.execute(
            sa.select(REPORT_STATE.c.last_error_code).where(
                REPORT_STATE.c.campaign_id == campaign_id,
                REPORT_STATE.c.status == ReportStatus.FAILED.value,
            )
        ).scalar_one_or_none()
        return None if code is None else str(code)

    def retry_report(self, campaign_id: str, now: float, remaining: int) -> bool:
        """Re-arm a failed report finalization."""
        result = self.session.execute(
            sa.update(REPORT_STATE)
            .where(
                REPORT_STATE.c.campaign_id == campaign_id,
                REPORT_STATE.c.status == ReportStatus.FAILED.value,
            )
            .values(_rearmed(REPORT_STATE, remaining, now))
        )
        return cast(sa.CursorResult[Any], result).rowcount == 1

    # -- delete --------------------------------------------------------------------------

    def delete(self, campaign_id: str, policy_sha256: str, suite_sha256: str) -> dict[str, int]:
        """Delete the campaign, every row that refers to it, its policy, and its suite
        unless another campaign binds it. Returns rows deleted per table."""
        deleted: dict[str, int] = {}

        def count(table: sa.Table, result: Any) -> None:
            rows = cast(sa.CursorResult[Any], result).rowcount
            if rows:
                deleted[table.name] = deleted.get(table.name, 0) + int(rows)

        for table in _campaign_tables():
            column = next(key.parent for key in table.foreign_keys if key.column.table is CAMPAIGNS)
            count(table, self.session.execute(sa.delete(table).where(column == campaign_id)))
        count(
            CAMPAIGNS,
            self.session.execute(
                sa.delete(CAMPAIGNS).where(CAMPAIGNS.c.campaign_id == campaign_id)
            ),
        )
        for table, column, value, binding in (
            (POLICIES, POLICIES.c.policy_sha256, policy_sha256, CAMPAIGNS.c.policy_sha256),
            (SUITES, SUITES.c.suite_sha256, suite_sha256, CAMPAIGNS.c.suite_sha256),
        ):
            still_bound = sa.exists().where(binding == value)
            count(
                table,
                self.session.execute(sa.delete(table).where(column == value, ~still_bound)),
            )
        return deleted
