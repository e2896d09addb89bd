"""The SQL of a finished campaign's archive: read its items once more, drop them, and
record what the campaign keeps in their place.

- :class:`ArchiveReads` (a read transaction's Connection): the campaign's archive
  columns and report rows by key, the unfinished items (an index range), every
  item with its result text and digest in code-point (locale, case key) order
  (one cursor, server-side on PostgreSQL, ``batch`` rows at a time), and the
  items still stored (what the audit of an archived campaign expects to be none).
- :class:`ArchiveRepository` (a write transaction's Session): the items locked in
  the order every other writer locks them (items, then the campaign row), the
  facts recorded on the campaign row as a compare-and-set (only a campaign not
  archived yet matches), and the items, their attempt history and the claim log
  deleted, each in one statement. No row is brought into memory: a million-item
  campaign is three ``DELETE`` statements the database runs on its own.

Like every repository, this never commits: the service's one transaction does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.domain.campaign import ReportStatus
from benchledger.models.campaign import (
    AttemptRow,
    CampaignRow,
    ClaimLogRow,
    ReportRow,
    ReportStateRow,
    WorkRow,
)
from benchledger.repositories.campaigns.predicates import UNFINISHED_WORK, item_order

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
WORK = cast(sa.Table, WorkRow.__table__)
ATTEMPTS = cast(sa.Table, AttemptRow.__table__)
CLAIMS = cast(sa.Table, ClaimLogRow.__table__)
REPORTS = cast(sa.Table, ReportRow.__table__)
REPORT_STATE = cast(sa.Table, ReportStateRow.__table__)

#: What an archive drops, dependents first (the history refers to the items).
DROPPED = (ATTEMPTS, CLAIMS, WORK)

_CID = sa.bindparam("cid", type_=sa.Text())

CAMPAIGN_ARCHIVE = sa.select(
    CAMPAIGNS.c.campaign_id,
    CAMPAIGNS.c.work_count,
    CAMPAIGNS.c.updated_at,
    CAMPAIGNS.c.archived_at,
    CAMPAIGNS.c.archived_items,
    CAMPAIGNS.c.archived_results_sha256,
    CAMPAIGNS.c.archived_summary_json,
    CAMPAIGNS.c.archived_seal,
).where(CAMPAIGNS.c.campaign_id == _CID)
REPORT_BINDING = (
    sa.select(
        REPORT_STATE.c.status,
        REPORTS.c.report_sha256,
        REPORTS.c.results_sha256,
        REPORTS.c.report_json,
    )
    .select_from(
        REPORT_STATE.outerjoin(REPORTS, REPORTS.c.campaign_id == REPORT_STATE.c.campaign_id)
    )
    .where(REPORT_STATE.c.campaign_id == _CID)
)
# The unfinished items: the ready index's (campaign_id, status) ranges, cut at one row.
HAS_UNFINISHED = (
    sa.select(sa.literal(1)).where(WORK.c.campaign_id == _CID, UNFINISHED_WORK).limit(1)
)
ITEMS_STORED = sa.select(sa.func.count()).select_from(WORK).where(WORK.c.campaign_id == _CID)
# The items locked (PostgreSQL; SQLite's write lock already excludes every writer) and
# counted without fetching them: the claim and delete lock items before the campaign row.
LOCK_ITEMS = sa.select(sa.func.count()).select_from(
    sa.select(WORK.c.work_id).where(WORK.c.campaign_id == _CID).with_for_update().subquery()
)


_ITEMS = {
    dialect: sa.select(
        WORK.c.work_id,
        WORK.c.target_locale,
        WORK.c.suite_case_key,
        WORK.c.status,
        WORK.c.attempts,
        WORK.c.last_error_code,
        WORK.c.result_json,
        WORK.c.result_sha256,
    )
    .where(WORK.c.campaign_id == _CID)
    .order_by(*item_order(dialect))
    for dialect in ("sqlite", "postgresql")
}


class ArchiveReads:
    """The archive's reads, on one read transaction's Connection."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.dialect = "postgresql" if connection.dialect.name == "postgresql" else "sqlite"

    def campaign(self, campaign_id: str) -> Any:
        """The campaign's id, work count, last update and archive columns, or ``None``."""
        return self.connection.execute(CAMPAIGN_ARCHIVE, {"cid": campaign_id}).first()

    def report(self, campaign_id: str) -> Any:
        """The report state's status with the kept report's digests and text (``None``
        columns without a report), or ``None`` without a report state."""
        return self.connection.execute(REPORT_BINDING, {"cid": campaign_id}).first()

    def has_unfinished(self, campaign_id: str) -> bool:
        return self.connection.execute(HAS_UNFINISHED, {"cid": campaign_id}).first() is not None

    def items_stored(self, campaign_id: str) -> int:
        """How many item rows the campaign has (an index-only count)."""
        return int(self.connection.execute(ITEMS_STORED, {"cid": campaign_id}).scalar_one())

    def items(self, campaign_id: str, batch: int) -> Iterator[list[tuple[Any, ...]]]:
        """Every item as (work id, locale, case key, status, attempts, last error code,
        result text, result sha256), in order, ``batch`` at a time, from one cursor."""
        result = self.connection.execution_options(stream_results=True, yield_per=batch).execute(
            _ITEMS[self.dialect], {"cid": campaign_id}
        )
        try:
            for rows in result.partitions():
                yield [tuple(row) for row in rows]
        finally:
            result.close()


class ArchiveRepository:
    """The archive's writes, on the service's write transaction."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def lock_items(self, campaign_id: str) -> int:
        """Lock the campaign's items (PostgreSQL) before its row, as a claim and
        ``delete`` do, so none of them deadlocks with the archive; how many there are."""
        return int(self.session.execute(LOCK_ITEMS, {"cid": campaign_id}).scalar_one())

    def report(self, campaign_id: str) -> Any:
        """As :meth:`ArchiveReads.report`, inside the write transaction."""
        return self.session.execute(REPORT_BINDING, {"cid": campaign_id}).first()

    def record(self, campaign_id: str, now: float, facts: Mapping[str, Any]) -> bool:
        """Record the archive's ``facts`` (the ``archived_*`` columns) and the audit that
        allowed it, if the campaign is not archived yet; whether it was."""
        result = self.session.execute(
            sa.update(CAMPAIGNS)
            .where(CAMPAIGNS.c.campaign_id == campaign_id, CAMPAIGNS.c.archived_at.is_(None))
            .values(
                **facts,
                updated_at=sa.case(
                    (CAMPAIGNS.c.updated_at < now, now), else_=CAMPAIGNS.c.updated_at
                ),
            )
        )
        return cast(sa.CursorResult[Any], result).rowcount == 1

    def drop(self, campaign_id: str) -> dict[str, int]:
        """Delete the campaign's attempt history, claim log and items; rows per table."""
        dropped: dict[str, int] = {}
        for table in DROPPED:
            result = self.session.execute(
                sa.delete(table).where(table.c.campaign_id == campaign_id)
            )
            dropped[table.name] = int(cast(sa.CursorResult[Any], result).rowcount)
        return dropped


def report_final(row: Any) -> bool:
    """Whether a :meth:`ArchiveReads.report` row is a final report: state succeeded, and
    the report stored."""
    return bool(
        row is not None and row.status == ReportStatus.SUCCEEDED and row.report_sha256 is not None
    )
