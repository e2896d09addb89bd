"""Read-only SQL behind the dashboard's campaign pages.

Every statement is bounded (``LIMIT``) or an aggregate the database computes,
and reaches rows through the work table's indexes:

- the completions of a time window walk the ready index
  (``campaign_id, status, ...``), never a Python loop over rows; failures by
  code read only the items that carry an error code;
- live leases are the leases index in expiry order; the retry queue is the
  ready index's ``retry_wait`` range in due order;
- a page of campaigns is a keyset seek on ``benchmark_campaigns_created``, in
  either direction;
- the results page's aggregates: items by (locale, status) are an index-only
  aggregate over the ready index; the succeeded items' results are one stream
  of the ready index's ``succeeded`` range (it reads each result's JSON: it
  grows with the campaign, so the dashboard caches it and, for a large
  campaign, refreshes it off the request path); the attempt history's span
  and its attempts per time bucket and outcome walk the history's
  ``(campaign_id, finished_at)`` index; the evaluator durations are one sorted
  stream of the campaign's timed attempts (a sort of the history's rows of
  the campaign: cached like the results);
- the compare form's campaigns are a bounded read of the campaigns table
  (``LIMIT``), newest first, optionally of one suite.

Nothing here writes, locks or commits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import consistent_snapshot
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_labels import CampaignFilter
from benchledger.models.campaign import AttemptRow, CampaignRow, WorkRow
from benchledger.repositories.campaigns.predicates import LEASED_WORK
from benchledger.repositories.campaigns.store import kept_by

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
WORK = cast(sa.Table, WorkRow.__table__)
ATTEMPTS = cast(sa.Table, AttemptRow.__table__)
#: Rows per batch of the streamed reads (results, durations).
STREAM_BATCH = 2_000

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
    CAMPAIGNS.c.name,
    CAMPAIGNS.c.candidate_provider_id,
    CAMPAIGNS.c.candidate_model_id,
    CAMPAIGNS.c.candidate_model_version,
)
# Items by (locale, status): index-only over the ready index's (campaign_id, status, ...).
_LOCALE_STATUS = (
    sa.select(WORK.c.target_locale, WORK.c.status, sa.func.count())
    .where(WORK.c.campaign_id == sa.bindparam("campaign_id"))
    .group_by(WORK.c.target_locale, WORK.c.status)
)
# The succeeded items' results: the ready index's ``succeeded`` range, then each row.
_SUCCEEDED_RESULTS = sa.select(WORK.c.target_locale, WORK.c.result_json).where(
    WORK.c.campaign_id == sa.bindparam("campaign_id"),
    WORK.c.status == WorkStatus.SUCCEEDED.value,
)
# The history's first and last finish and its size: both ends of its finished index.
_ATTEMPT_SPAN = sa.select(
    sa.func.min(ATTEMPTS.c.finished_at), sa.func.max(ATTEMPTS.c.finished_at), sa.func.count()
).where(ATTEMPTS.c.campaign_id == sa.bindparam("campaign_id"))
_BUCKET = sa.func.floor(
    (ATTEMPTS.c.finished_at - sa.bindparam("start", type_=sa.Float()))
    / sa.bindparam("width", type_=sa.Float())
)
_ATTEMPTS_PER_BUCKET = (
    sa.select(_BUCKET.label("bucket"), ATTEMPTS.c.outcome, sa.func.count())
    .where(ATTEMPTS.c.campaign_id == sa.bindparam("campaign_id"))
    .group_by(_BUCKET, ATTEMPTS.c.outcome)
)
_TIMED = (
    ATTEMPTS.c.campaign_id == sa.bindparam("campaign_id"),
    ATTEMPTS.c.duration_seconds.is_not(None),
)
_DURATION_COUNT = sa.select(sa.func.count()).where(*_TIMED)
_DURATIONS = (
    sa.select(ATTEMPTS.c.duration_seconds).where(*_TIMED).order_by(ATTEMPTS.c.duration_seconds)
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

    def page(
        self,
        after: str | None,
        limit: int,
        *,
        newest_first: bool,
        where: CampaignFilter | None = None,
    ) -> Sequence[Any] | None:
        """Up to ``limit`` campaign rows in (created_at, campaign_id) order, either way,
        kept by ``where`` (as ``CampaignService.list`` filters).

        ``None`` when ``after`` names no campaign.
        """
        key = (CAMPAIGNS.c.created_at, CAMPAIGNS.c.campaign_id)
        order = [column.desc() for column in key] if newest_first else list(key)
        statement = sa.select(*_CAMPAIGN_COLUMNS).order_by(*order).limit(limit)
        if where is not None:
            statement = statement.where(*kept_by(where))
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

    # -- the results page ------------------------------------------------------------

    def locale_status(self, campaign_id: str) -> list[tuple[str, str, int]]:
        """(locale, status, items): an index-only aggregate (the ready index)."""
        rows = self.session.execute(_LOCALE_STATUS, {"campaign_id": campaign_id})
        return [(str(locale), str(status), int(count)) for locale, status, count in rows]

    def succeeded_results(self, campaign_id: str) -> Iterator[Sequence[Any]]:
        """(locale, result text) of every succeeded item, in batches (memory stays flat).

        O(succeeded items): it reads each one's result.
        """
        result = (
            self.session.connection()
            .execution_options(stream_results=True, yield_per=STREAM_BATCH)
            .execute(_SUCCEEDED_RESULTS, {"campaign_id": campaign_id})
        )
        try:
            for batch in result.partitions():
                yield [tuple(row) for row in batch]
        finally:
            result.close()

    def attempt_span(self, campaign_id: str) -> tuple[float | None, float | None, int]:
        """The history's first and last ``finished_at`` and how many attempts it holds."""
        row = self.session.execute(_ATTEMPT_SPAN, {"campaign_id": campaign_id}).one()
        first, last, count = row
        return (
            None if first is None else float(first),
            None if last is None else float(last),
            int(count),
        )

    def attempts_per_bucket(
        self, campaign_id: str, start: float, width: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, outcome, attempts): bucket ``k`` holds ``start + k*width`` onwards."""
        rows = self.session.execute(
            _ATTEMPTS_PER_BUCKET, {"campaign_id": campaign_id, "start": start, "width": width}
        )
        return [(int(bucket), str(outcome), int(count)) for bucket, outcome, count in rows]

    def duration_ranks(self, campaign_id: str, ranks: Sequence[int]) -> dict[int, float]:
        """The timed attempts' durations at 1-based ``ranks`` in ascending order.

        One count, then one sorted stream of the campaign's timed attempts (the
        database sorts them), stopped after the highest rank asked for.
        """
        wanted = sorted(set(ranks))
        found: dict[int, float] = {}
        if not wanted:
            return found
        result = (
            self.session.connection()
            .execution_options(stream_results=True, yield_per=STREAM_BATCH)
            .execute(_DURATIONS, {"campaign_id": campaign_id})
        )
        try:
            position = 0
            for batch in result.partitions():
                for (value,) in batch:
                    position += 1
                    if position in ranks:
                        found[position] = float(value)
                if position >= wanted[-1]:
                    break
        finally:
            result.close()
        return found

    def timed_attempts(self, campaign_id: str) -> int:
        """How many of the campaign's attempts have a duration (a count over the history)."""
        return int(self.session.execute(_DURATION_COUNT, {"campaign_id": campaign_id}).scalar_one())

    # -- the compare form --------------------------------------------------------------

    def choices(self, suite_sha256: str | None, limit: int) -> Sequence[Any]:
        """Up to ``limit`` campaigns, newest first (of one suite, when given)."""
        statement = sa.select(*_CAMPAIGN_COLUMNS)
        if suite_sha256 is not None:
            statement = statement.where(CAMPAIGNS.c.suite_sha256 == suite_sha256)
        statement = statement.order_by(
            CAMPAIGNS.c.created_at.desc(), CAMPAIGNS.c.campaign_id.desc()
        ).limit(limit)
        return self.session.execute(statement).all()
