"""The SQL behind per-case results, the attempt history and comparisons.

Pages are keyset pages in (locale, case key) code-point order (the unique index
``(campaign_id, target_locale, suite_case_key)`` serves them), so a page costs
the same at any depth. Writes to the history are in :mod:`.leases` beside the
outcomes they record; this module only reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import sqlalchemy as sa

from benchledger.models.campaign import AttemptRow, CampaignRow, WorkRow
from benchledger.repositories.campaigns.predicates import item_order

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
WORK = cast(sa.Table, WorkRow.__table__)
ATTEMPTS = cast(sa.Table, AttemptRow.__table__)

#: Rows per batch when a whole campaign's results are streamed.
STREAM_BATCH = 2_000

_CID = sa.bindparam("cid", type_=sa.Text())

_ITEM_COLUMNS = (
    WORK.c.work_id,
    WORK.c.target_locale,
    WORK.c.suite_case_key,
    WORK.c.status,
    WORK.c.attempts,
    WORK.c.last_error_code,
    WORK.c.result_json,
)
# Whether the campaign's items were archived (dropped): its row's archived_at, by key.
CAMPAIGN_ARCHIVED = sa.select(CAMPAIGNS.c.archived_at).where(CAMPAIGNS.c.campaign_id == _CID)
CAMPAIGN_LABELS = sa.select(
    CAMPAIGNS.c.suite_sha256,
    CAMPAIGNS.c.name,
    CAMPAIGNS.c.candidate_provider_id,
    CAMPAIGNS.c.candidate_model_id,
    CAMPAIGNS.c.candidate_model_version,
    CAMPAIGNS.c.archived_at,
    CAMPAIGNS.c.archived_summary_json,
).where(CAMPAIGNS.c.campaign_id == _CID)
CURSOR_KEY = sa.select(WORK.c.target_locale, WORK.c.suite_case_key).where(
    WORK.c.campaign_id == _CID, WORK.c.work_id == sa.bindparam("work_id", type_=sa.Text())
)
ATTEMPT_SUMMARIES = (
    sa.select(
        ATTEMPTS.c.work_id,
        ATTEMPTS.c.outcome,
        sa.func.count(),
        sa.func.min(ATTEMPTS.c.claimed_at),
        sa.func.max(ATTEMPTS.c.finished_at),
    )
    .where(ATTEMPTS.c.work_id.in_(sa.bindparam("work_ids", expanding=True)))
    .group_by(ATTEMPTS.c.work_id, ATTEMPTS.c.outcome)
)
_ATTEMPT_COLUMNS = (
    ATTEMPTS.c.attempt_id,
    ATTEMPTS.c.work_id,
    ATTEMPTS.c.attempt,
    ATTEMPTS.c.worker_id,
    ATTEMPTS.c.claimed_at,
    ATTEMPTS.c.finished_at,
    ATTEMPTS.c.outcome,
    ATTEMPTS.c.error_code,
    ATTEMPTS.c.duration_seconds,
)
HAS_ATTEMPT = sa.select(sa.literal(1)).where(
    ATTEMPTS.c.attempt_id == sa.bindparam("after", type_=sa.Integer()),
    ATTEMPTS.c.campaign_id == _CID,
)


class ResultReads:
    """Read-only statements over a campaign's items and their attempt history."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.dialect = "postgresql" if connection.dialect.name == "postgresql" else "sqlite"

    def campaign_row(self, campaign_id: str) -> Any:
        """The campaign's suite sha256, name, candidate and archive columns, or None."""
        return self.connection.execute(CAMPAIGN_LABELS, {"cid": campaign_id}).first()

    def campaign_archived(self, campaign_id: str) -> bool | None:
        """Whether the campaign was archived (its items dropped); ``None``: no campaign."""
        row = self.connection.execute(CAMPAIGN_ARCHIVED, {"cid": campaign_id}).first()
        return None if row is None else row[0] is not None

    def cursor_key(self, campaign_id: str, work_id: str) -> tuple[str, str] | None:
        """The (locale, case key) of a page cursor (a work id of this campaign), or None."""
        row = self.connection.execute(CURSOR_KEY, {"cid": campaign_id, "work_id": work_id}).first()
        return None if row is None else (row[0], row[1])

    def page(
        self,
        campaign_id: str,
        *,
        status: str | None,
        locale: str | None,
        after: tuple[str, str] | None,
        limit: int,
    ) -> list[tuple[Any, ...]]:
        """Up to ``limit`` items after ``after``, filtered by status and locale."""
        statement, params = self._items(campaign_id, status, locale, after)
        return [tuple(row) for row in self.connection.execute(statement.limit(limit), params)]

    def stream_items(
        self, campaign_id: str, *, status: str | None, locale: str | None, batch: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Every item (filtered), in order, ``batch`` at a time, from one cursor (a
        server-side one on PostgreSQL): an export reads the campaign once."""
        statement, params = self._items(campaign_id, status, locale, None)
        result = self.connection.execution_options(stream_results=True, yield_per=batch).execute(
            statement, params
        )
        try:
            for rows in result.partitions():
                yield [tuple(row) for row in rows]
        finally:
            result.close()

    def _items(
        self,
        campaign_id: str,
        status: str | None,
        locale: str | None,
        after: tuple[str, str] | None,
    ) -> tuple[sa.Select[Any], dict[str, Any]]:
        locale_column, key_column = item_order(self.dialect)
        statement = sa.select(*_ITEM_COLUMNS).where(WORK.c.campaign_id == _CID)
        params: dict[str, Any] = {"cid": campaign_id}
        if status is not None:
            statement = statement.where(WORK.c.status == sa.bindparam("status"))
            params["status"] = status
        if locale is not None:
            statement = statement.where(WORK.c.target_locale == sa.bindparam("locale"))
            params["locale"] = locale
        if after is not None:
            statement = statement.where(
                sa.tuple_(locale_column, key_column)
                > sa.tuple_(sa.bindparam("after_locale"), sa.bindparam("after_key"))
            )
            params["after_locale"], params["after_key"] = after
        return statement.order_by(locale_column, key_column), params

    def attempt_summaries(
        self, work_ids: Sequence[str]
    ) -> dict[str, tuple[dict[str, int], float | None, float | None]]:
        """Per work id: counts by outcome, first claim and last finish of its history."""
        summaries: dict[str, tuple[dict[str, int], float | None, float | None]] = {}
        if not work_ids:
            return summaries
        rows = self.connection.execute(ATTEMPT_SUMMARIES, {"work_ids": list(work_ids)})
        for work_id, outcome, count, first, last in rows:
            counts, earliest, latest = summaries.get(work_id, ({}, None, None))
            counts[outcome] = int(count)
            if first is not None:
                earliest = first if earliest is None else min(earliest, first)
            if last is not None:
                latest = last if latest is None else max(latest, last)
            summaries[work_id] = (counts, earliest, latest)
        return summaries

    def stream(self, campaign_id: str) -> Iterator[Sequence[Any]]:
        """Every item as (locale, case key, status, result text), in batches, in order."""
        locale_column, key_column = item_order(self.dialect)
        statement = (
            sa.select(
                WORK.c.target_locale, WORK.c.suite_case_key, WORK.c.status, WORK.c.result_json
            )
            .where(WORK.c.campaign_id == _CID)
            .order_by(locale_column, key_column)
        )
        result = self.connection.execution_options(
            stream_results=True, yield_per=STREAM_BATCH
        ).execute(statement, {"cid": campaign_id})
        try:
            for batch in result.partitions():
                yield [tuple(row) for row in batch]
        finally:
            result.close()

    def has_attempt(self, campaign_id: str, attempt_id: int) -> bool:
        row = self.connection.execute(HAS_ATTEMPT, {"cid": campaign_id, "after": attempt_id})
        return row.first() is not None

    def attempts(
        self, campaign_id: str, *, work_id: str | None, after: int | None, limit: int
    ) -> list[tuple[Any, ...]]:
        """Up to ``limit`` attempts of the campaign (or one item), in the order recorded."""
        statement = sa.select(*_ATTEMPT_COLUMNS).where(ATTEMPTS.c.campaign_id == _CID)
        params: dict[str, Any] = {"cid": campaign_id}
        if work_id is not None:
            statement = statement.where(ATTEMPTS.c.work_id == sa.bindparam("work_id"))
            params["work_id"] = work_id
        if after is not None:
            statement = statement.where(ATTEMPTS.c.attempt_id > sa.bindparam("after"))
            params["after"] = after
        statement = statement.order_by(ATTEMPTS.c.attempt_id).limit(limit)
        return [tuple(row) for row in self.connection.execute(statement, params)]
