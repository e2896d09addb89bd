"""Campaign rows and the content-addressed policies and suites they bind.

:class:`CampaignRepository` runs on the caller's session and never commits: the
service owns the transaction. The throttled touch of a campaign's ``updated_at``
(:func:`touch_campaign`) runs on the caller's Connection too, where a lease
holder's write moved the campaign on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import Prebuilt, consistent_snapshot, insert_if_absent
from benchledger.domain.campaign_labels import CampaignFilter, Candidate
from benchledger.models.campaign import CampaignRow, StoredPolicyRow, StoredSuiteRow

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
POLICIES = cast(sa.Table, StoredPolicyRow.__table__)
SUITES = cast(sa.Table, StoredSuiteRow.__table__)

# The campaign row's updated_at moves at most once per this many seconds. On
# PostgreSQL every writer touching one row would queue on its row lock; the
# throttle (plus SKIP LOCKED) keeps the campaign row off the hot path.
PROGRESS_TOUCH_SECONDS = 1.0


# The campaign row's updated_at moves forward (throttled; never backwards, never waits).
_DUE_CAMPAIGN = (
    sa.select(CAMPAIGNS.c.campaign_id)
    .where(
        CAMPAIGNS.c.campaign_id == sa.bindparam("cid"),
        CAMPAIGNS.c.updated_at <= sa.bindparam("threshold", type_=CAMPAIGNS.c.updated_at.type),
    )
    # NO KEY UPDATE: does not conflict with the KEY SHARE locks of foreign keys.
    .with_for_update(skip_locked=True, key_share=True)
    .cte("due_campaign")
)
TOUCH_CAMPAIGN = Prebuilt(
    sa.update(CAMPAIGNS)
    .where(CAMPAIGNS.c.campaign_id == _DUE_CAMPAIGN.c.campaign_id)
    .values(updated_at=sa.bindparam("now", type_=CAMPAIGNS.c.updated_at.type))
    # RETURNING, not rowcount: Python's sqlite3 reports -1 for a statement starting with WITH.
    .returning(CAMPAIGNS.c.campaign_id)
)


def touch_campaign(connection: sa.Connection, campaign_id: str, now: float) -> bool:
    """Move the campaign's ``updated_at`` to ``now`` (at most once per
    ``PROGRESS_TOUCH_SECONDS``; never backwards; skips the row if another writer holds
    it); whether it moved."""
    params = {"cid": campaign_id, "threshold": now - PROGRESS_TOUCH_SECONDS, "now": now}
    return TOUCH_CAMPAIGN(connection, params).first() is not None


def _candidate_columns(candidate: Candidate) -> dict[str, str | None]:
    return {
        "candidate_provider_id": candidate.provider_id,
        "candidate_model_id": candidate.model_id,
        "candidate_model_version": candidate.model_version,
    }


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def kept_by(where: CampaignFilter) -> list[sa.ColumnElement[bool]]:
    """The conditions of a listing's filter (each given field must hold)."""
    c = CAMPAIGNS.c
    kept: list[sa.ColumnElement[bool]] = []
    if where.provider is not None:
        kept.append(c.candidate_provider_id == where.provider)
    if where.model is not None:
        kept.append(c.candidate_model_id == where.model)
    if where.suite is not None:
        kept.append(c.suite_sha256.like(_like_escaped(where.suite.lower()) + "%", escape="\\"))
    if where.name is not None:
        part = "%" + _like_escaped(where.name.lower()) + "%"
        kept.append(sa.func.lower(c.name).like(part, escape="\\"))
    return kept


class CampaignRepository:
    """Campaign rows and the content-addressed policies and suites they bind."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def snapshot(self) -> None:
        """Make this read transaction one consistent snapshot (before its first query)."""
        consistent_snapshot(self.session)

    def get(self, campaign_id: str) -> sa.Row[Any] | None:
        return self.session.execute(
            sa.select(CAMPAIGNS).where(CAMPAIGNS.c.campaign_id == campaign_id)
        ).first()

    def page(
        self, after: str | None, limit: int, where: CampaignFilter | None = None
    ) -> Sequence[Any] | None:
        """Up to ``limit`` campaign rows in (created_at, campaign_id) order, after ``after``,
        of those ``where`` keeps (candidate, suite sha256 prefix, part of the name).

        ``None`` when ``after`` names no campaign. Campaigns are never deleted
        and their ``created_at`` never changes, so the order is stable and a
        cursor stays valid.
        """
        key = sa.tuple_(CAMPAIGNS.c.created_at, CAMPAIGNS.c.campaign_id)
        statement = sa.select(CAMPAIGNS).order_by(*key.clauses).limit(limit)
        if where is not None:
            statement = statement.where(*kept_by(where))
        if after is not None:
            cursor = self.session.execute(
                sa.select(CAMPAIGNS.c.created_at).where(CAMPAIGNS.c.campaign_id == after)
            ).first()
            if cursor is None:
                return None
            statement = statement.where(key > sa.tuple_(cursor.created_at, after))
        return self.session.execute(statement).all()

    def insert(
        self,
        campaign_id: str,
        policy_sha256: str,
        suite_sha256: str,
        work_count: int,
        now: float,
        max_attempts: int,
        candidate: Candidate,
        name: str | None = None,
    ) -> None:
        self.session.execute(
            sa.insert(CAMPAIGNS).values(
                campaign_id=campaign_id,
                policy_sha256=policy_sha256,
                suite_sha256=suite_sha256,
                work_count=work_count,
                max_attempts=max_attempts,
                created_at=now,
                updated_at=now,
                name=name,
                **_candidate_columns(candidate),
            )
        )

    def set_candidate(self, campaign_id: str, candidate: Candidate) -> None:
        """Copy the policy's candidate onto the row (a registered legacy campaign)."""
        self.session.execute(
            sa.update(CAMPAIGNS)
            .where(CAMPAIGNS.c.campaign_id == campaign_id)
            .values(**_candidate_columns(candidate))
        )

    def set_routing(self, campaign_id: str, limit_group: str | None, evaluator: str | None) -> None:
        """Which limit group the campaign's claims share caps with, and its evaluator's name."""
        self.session.execute(
            sa.update(CAMPAIGNS)
            .where(CAMPAIGNS.c.campaign_id == campaign_id)
            .values(limit_group=limit_group, evaluator=evaluator)
        )

    def set_name(self, campaign_id: str, name: str | None) -> bool:
        """Name (or, with ``None``, unname) the campaign; False when there is none."""
        result = self.session.execute(
            sa.update(CAMPAIGNS).where(CAMPAIGNS.c.campaign_id == campaign_id).values(name=name)
        )
        return cast(sa.CursorResult[Any], result).rowcount == 1

    def touch(self, campaign_id: str, now: float) -> None:
        """Move ``updated_at`` forward to ``now`` (throttled; never backwards, never waits)."""
        touch_campaign(self.session.connection(), campaign_id, now)

    def policy_json(self, policy_sha256: str) -> str | None:
        return self.session.execute(
            sa.select(POLICIES.c.policy_json).where(POLICIES.c.policy_sha256 == policy_sha256)
        ).scalar_one_or_none()

    def suite_json(self, suite_sha256: str) -> str | None:
        return self.session.execute(
            sa.select(SUITES.c.suite_json).where(SUITES.c.suite_sha256 == suite_sha256)
        ).scalar_one_or_none()

    def suite_row(self, suite_sha256: str) -> sa.Row[Any] | None:
        return self.session.execute(
            sa.select(SUITES).where(SUITES.c.suite_sha256 == suite_sha256)
        ).first()

    def put_policy(self, policy_sha256: str, policy_json: str, now: float) -> bool:
        return insert_if_absent(
            self.session,
            POLICIES,
            {"policy_sha256": policy_sha256, "policy_json": policy_json, "created_at": now},
        )

    def put_suite(self, suite_sha256: str, suite_json: str, case_count: int, now: float) -> bool:
        return insert_if_absent(
            self.session,
            SUITES,
            {
                "suite_sha256": suite_sha256,
                "suite_json": suite_json,
                "case_count": case_count,
                "created_at": now,
            },
        )
