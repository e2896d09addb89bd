"""The SQL behind the campaigns' Prometheus metrics, besides what ``status`` reads.

Two reads, each one statement over every campaign at once, built once:

- **expired leases**: leased items whose lease has run out and that no claim
  has taken back yet, per campaign. It walks the partial leases index
  (``benchmark_campaign_leases``: leased items only, by campaign and expiry),
  so it costs the number of live leases, never the campaign's size;
- **the attempt history's outcomes**: attempts per (campaign, outcome) among
  the history rows after an ``attempt_id``. It is a range of the primary key
  (the rows added since a mark), so a caller that keeps a running total, as
  :mod:`benchledger.services.campaigns.metrics` does, reads only the rows
  added since its last scrape. ``settle_upto`` splits the counts in two: rows
  at or below it (the caller adds them to its total for good) and the newer
  ones (counted again next time, in case an older id commits late).

Nothing here writes, locks or commits.
"""

from __future__ import annotations

from typing import cast

import attrs
import sqlalchemy as sa

from benchledger.models.campaign import AttemptRow, WorkRow
from benchledger.repositories.campaigns.predicates import LEASED_WORK

WORK = cast(sa.Table, WorkRow.__table__)
ATTEMPTS = cast(sa.Table, AttemptRow.__table__)

_EXPIRED_LEASES = (
    sa.select(WORK.c.campaign_id, sa.func.count())
    .where(LEASED_WORK, WORK.c.lease_expires_at <= sa.bindparam("now", type_=sa.Float()))
    .group_by(WORK.c.campaign_id)
)
_LAST_ATTEMPT = sa.select(sa.func.max(ATTEMPTS.c.attempt_id))
# The rows after ``after``, each marked settled (at or below ``settle_upto``) or not; the
# grouping is on the subquery's columns (one bound parameter, whatever the dialect).
_MARKED = (
    sa.select(
        ATTEMPTS.c.campaign_id,
        ATTEMPTS.c.outcome,
        sa.case(
            (ATTEMPTS.c.attempt_id <= sa.bindparam("settle_upto", type_=sa.Integer()), 1),
            else_=0,
        ).label("settled"),
    )
    .where(ATTEMPTS.c.attempt_id > sa.bindparam("after", type_=sa.Integer()))
    .subquery("marked")
)
_OUTCOMES_AFTER = sa.select(
    _MARKED.c.campaign_id, _MARKED.c.outcome, _MARKED.c.settled, sa.func.count()
).group_by(_MARKED.c.campaign_id, _MARKED.c.outcome, _MARKED.c.settled)


@attrs.frozen
class OutcomeCount:
    """Attempts of one campaign with one outcome, in one part of an id range."""

    campaign_id: str
    outcome: str
    settled: bool
    count: int


class CampaignMetricReads:
    """The metrics' own reads, on the caller's connection (one read snapshot)."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection

    def expired_leases(self, now: float) -> dict[str, int]:
        """Per campaign, its leased items whose lease expired at or before ``now``."""
        rows = self.connection.execute(_EXPIRED_LEASES, {"now": now})
        return {str(campaign_id): int(count) for campaign_id, count in rows}

    def last_attempt_id(self) -> int:
        """The highest ``attempt_id`` of the history (0 when it is empty): one seek."""
        value = self.connection.execute(_LAST_ATTEMPT).scalar()
        return 0 if value is None else int(value)

    def outcomes_after(self, after: int, settle_upto: int) -> list[OutcomeCount]:
        """Attempts after ``after`` per (campaign, outcome), split at ``settle_upto``."""
        rows = self.connection.execute(
            _OUTCOMES_AFTER, {"after": after, "settle_upto": settle_upto}
        )
        return [
            OutcomeCount(str(campaign_id), str(outcome), bool(settled), int(count))
            for campaign_id, outcome, settled, count in rows
        ]
