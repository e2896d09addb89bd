"""Read-only SQL behind the dashboard's campaign pages.

Every statement is bounded (``LIMIT``) or an aggregate the database computes,
and reaches rows through the work table's indexes:

- the completions of a time window walk the ready index
  (``campaign_id, status, ...``), never a Python loop over rows; failures by
  code read only the items that carry an error code;
- live leases are the leases index in expiry order; the retry queue is the
  ready index's ``retry_wait`` range in due order;
- a page of campaigns is a keyset seek on ``benchmark_campaigns_created``, in
  either direction.

Nothing here writes, locks or commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import consistent_snapshot
from benchledger.domain.campaign import WorkStatus
from benchledger.models.campaign import CampaignRow, WorkRow
from benchledger.repositories.campaigns.predicates import LEASED_WORK

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
WORK = cast(sa.Table, WorkRow.__table__)

# The statuses whose items' last error codes the error summaries count.
_WITH_ERRORS = (WorkStatus.RETRY_WAIT.value, WorkStatus.FAILED.value, WorkStatus.LEASED.value)

# Named columns only: a page never depends on columns later revisions add.
_CAMPAIGN_COLUMNS = (
    CAMPAIGNS.c.campaign_id,
    CAMPAIGNS.c.policy_sha256,
    CAMPAIGNS.c.suite_sha256,
    CAMPAIGNS.c.work_count,
    CAMPAIGNS.c.created_at,
    CAMPAIGNS.c.updated_at,
)
_ERRORS = (
    sa.select(WORK.c.last_error_code, WORK.c.status, sa.func.count())
    .where(
        WORK.c.campaign_id == sa.bindparam("campaign_id"),
        WORK.c.status.in_(_WITH_ERRORS),
        WORK.c.last_error_code.is_not(None),
    )
    .group_by(WORK.c.last_error_code, WORK.c.status)
)
_MINUTE = sa.func.floor(WORK.c.updated_at / 60)
_COMPLETIONS = (
    sa.select(_MINUTE.label("minute"), sa.func.count())
    .where(
        WORK.c.campaign_id == sa.bindparam("campaign_id"),
        WORK.c.status == WorkStatus.SUCCEEDED.value,
        WORK.c.updated_at >= sa.bindparam("since"),
    )
    .group_by(_MINUTE)
)
_LEASE_COLUMNS = (
    WORK.c.target_locale,
    WORK.c.suite_case_key,
    WORK.c.lease_owner,
    WORK.c.attempts,
    WORK.c.max_attempts,
    WORK.c.lease_expires_at,
)
_LEASES = (
    sa.select(*_LEASE_COLUMNS)
    .where(WORK.c.campaign_id == sa.bindparam("campaign_id"), LEASED_WORK)
    .order_by(WORK.c.lease_expires_at)
    .limit(sa.bindparam("limit"))
)
_RETRY_COLUMNS = (
    WORK.c.target_locale,
    WORK.c.suite_case_key,
    WORK.c.attempts,
    WORK.c.max_attempts,
    WORK.c.next_attempt_at,
    WORK.c.last_error_code,
)
_RETRIES = (
    sa.select(*_RETRY_COLUMNS)
    .where(
        WORK.c.campaign_id == sa.bindparam("campaign_id"),
        WORK.c.status == WorkStatus.RETRY_WAIT.value,
    )
    .order_by(WORK.c.next_attempt_at, WORK.c.target_locale, WORK.c.suite_case_key)
    .limit(sa.bindparam("limit"))
)
_EXAMPLES = (
    sa.select(
        WORK.c.target_locale,
        WORK.c.suite_case_key,
        WORK.c.status,
        WORK.c.attempts,
        WORK.c.updated_at,
    )
    .where(
        WORK.c.campaign_id == sa.bindparam("campaign_id"),
        WORK.c.status.in_(_WITH_ERRORS),
        WORK.c.last_error_code == sa.bindparam("code"),
    )
    .limit(sa.bindparam("limit"))
)


class CampaignViewRepository:
    """The dashboard's campaign reads, on the caller's (read) session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def snapshot(self) -> None:
        """One consistent snapshot for the transaction (before its first query)."""
        consistent_snapshot(self.session)

    def page(self, after: str | None, limit: int, *, newest_first: bool) -> Sequence[Any] | None:
        """Up to ``limit`` campaign rows in (created_at, campaign_id) order, either way.

        ``None`` when ``after`` names no campaign.
        """
        key = (CAMPAIGNS.c.created_at, CAMPAIGNS.c.campaign_id)
        order = [column.desc() for column in key] if newest_first else list(key)
        statement = sa.select(*_CAMPAIGN_COLUMNS).order_by(*order).limit(limit)
        if after is not None:
            cursor = self.session.execute(
                sa.select(CAMPAIGNS.c.created_at).where(CAMPAIGNS.c.campaign_id == after)
            ).first()
            if cursor is None:
                return None
            position = sa.tuple_(*key)
            bound = sa.tuple_(sa.literal(cursor.created_at), sa.literal(after))
            statement = statement.where(position < bound if newest_first else position > bound)
        return self.session.execute(statement).all()

    def errors(self, campaign_id: str) -> list[tuple[str, str, int]]:
        """(error code, status, count) of the items whose last attempt failed."""
        rows = self.session.execute(_ERRORS, {"campaign_id": campaign_id})
        return [(str(code), str(status), int(count)) for code, status, count in rows]

    def failure_examples(self, campaign_id: str, code: str, limit: int) -> Sequence[Any]:
        return self.session.execute(
            _EXAMPLES, {"campaign_id": campaign_id, "code": code, "limit": limit}
        ).all()

    def completions_per_minute(self, campaign_id: str, since: float) -> dict[int, int]:
        """Succeeded items per minute (epoch minute -> count) from ``since`` on."""
        rows = self.session.execute(_COMPLETIONS, {"campaign_id": campaign_id, "since": since})
        return {int(minute): int(count) for minute, count in rows}

    def leases(self, campaign_id: str, limit: int) -> Sequence[Any]:
        """Leased items, the soonest to expire first."""
        return self.session.execute(_LEASES, {"campaign_id": campaign_id, "limit": limit}).all()

    def retries(self, campaign_id: str, limit: int) -> Sequence[Any]:
        """Items waiting to retry, the soonest due first."""
        return self.session.execute(_RETRIES, {"campaign_id": campaign_id, "limit": limit}).all()
