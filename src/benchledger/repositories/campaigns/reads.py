"""The SQL of the campaign reads an operator runs: status, health and the integrity audit.

Statements are built once and run on a :class:`~sqlalchemy.Connection` in one
read transaction (:func:`read_snapshot`), never taking a write lock.

- ``status`` and ``health`` read the campaign row (with its stored policy
  and its suite's case count), counts by status (the ready index, whose
  leading columns are ``campaign_id, status``: index-only counts of the
  unfinished items' ranges; succeeded items are the rest of the work count), error
  counts (the partial index of items with an error code), a few seeks on the
  ready and leases indexes (earliest due time, earliest and latest lease
  expiry) and the report rows by key. None of it reads the items' rows one by
  one or grows with their results.
- both also count the item outcomes recorded since the last audit (the attempt
  history's ``(campaign_id, finished_at)`` index, a range cut at
  :data:`CHANGES_COUNTED` rows), to say whether the audit is still current.
- ``verify`` streams every item of a campaign in (locale, case key) code-point
  order through a server-side cursor (PostgreSQL) or SQLite's own cursor, in
  batches, so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_audit import ITEM_COLUMNS
from benchledger.domain.campaign_codes import THROTTLED
from benchledger.domain.campaign_health import CHANGES_COUNTED
from benchledger.models.campaign import (
    AttemptRow,
    CampaignRow,
    ReportRow,
    ReportStateRow,
    StoredPolicyRow,
    StoredSuiteRow,
    WorkRow,
)
from benchledger.repositories.campaigns.predicates import (
    LEASED_WORK,
    UNFINISHED_WORK,
    item_order,
)

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
WORK = cast(sa.Table, WorkRow.__table__)
REPORTS = cast(sa.Table, ReportRow.__table__)
REPORT_STATE = cast(sa.Table, ReportStateRow.__table__)
POLICIES = cast(sa.Table, StoredPolicyRow.__table__)
SUITES = cast(sa.Table, StoredSuiteRow.__table__)
ATTEMPTS = cast(sa.Table, AttemptRow.__table__)

#: Items per batch of the integrity audit's stream.
AUDIT_BATCH = 1_000

_CID = sa.bindparam("cid", type_=sa.Text())
_HAS_ERROR = sa.text("benchmark_campaign_work.last_error_code IS NOT NULL")

CAMPAIGN_FACTS = (
    sa.select(
        CAMPAIGNS,
        POLICIES.c.policy_json,
        SUITES.c.case_count.label("suite_case_count"),
        SUITES.c.suite_sha256.label("stored_suite_sha256"),
    )
    .select_from(
        CAMPAIGNS.outerjoin(
            POLICIES, POLICIES.c.policy_sha256 == CAMPAIGNS.c.policy_sha256
        ).outerjoin(SUITES, SUITES.c.suite_sha256 == CAMPAIGNS.c.suite_sha256)
    )
    .where(CAMPAIGNS.c.campaign_id == _CID)
)
# Every status but succeeded: the ready index's (campaign_id, status) ranges of the
# unfinished items only; the succeeded count is the work count less these.
UNFINISHED_COUNTS = (
    sa.select(WORK.c.status, sa.func.count())
    .where(WORK.c.campaign_id == _CID, UNFINISHED_WORK)
    .group_by(WORK.c.status)
)
ERROR_COUNTS = (
    sa.select(WORK.c.last_error_code, sa.func.count())
    .where(WORK.c.campaign_id == _CID, _HAS_ERROR)
    .group_by(WORK.c.last_error_code)
    .order_by(WORK.c.last_error_code)
)


def _first(column: sa.ColumnElement[Any], status: Any, *, latest: bool = False) -> Any:
    # MIN()/MAX() as ORDER BY ... LIMIT 1: the index's order serves it, whatever the
    # planner's statistics say.
    return (
        sa.select(column)
        .where(WORK.c.campaign_id == _CID, status, column.is_not(None))
        .order_by(column.desc() if latest else column)
        .limit(1)
        .scalar_subquery()
    )


NEXT_DUE = sa.select(
    _first(WORK.c.next_attempt_at, WORK.c.status == WorkStatus.PENDING.value).label(
        "pending_due_at"
    ),
    _first(WORK.c.next_attempt_at, WORK.c.status == WorkStatus.RETRY_WAIT.value).label(
        "retry_due_at"
    ),
    _first(WORK.c.lease_expires_at, LEASED_WORK).label("first_lease_expiry"),
    _first(
        WORK.c.next_attempt_at,
        sa.and_(
            WORK.c.status == WorkStatus.RETRY_WAIT.value,
            WORK.c.last_error_code.startswith(THROTTLED, autoescape=True),
        ),
    ).label("throttled_due_at"),
)
TIMES = NEXT_DUE.add_columns(
    _first(WORK.c.lease_expires_at, LEASED_WORK, latest=True).label("last_lease_expiry"),
)
REPORT_STATE_ROW = sa.select(REPORT_STATE).where(REPORT_STATE.c.campaign_id == _CID)
REPORT_ROW = sa.select(REPORTS).where(REPORTS.c.campaign_id == _CID)
HAS_REPORT = sa.select(sa.literal(1)).where(REPORTS.c.campaign_id == _CID)
POLICY_JSON = sa.select(POLICIES.c.policy_json).where(
    POLICIES.c.policy_sha256 == sa.bindparam("sha", type_=sa.Text())
)
SUITE_JSON = sa.select(SUITES.c.suite_json, SUITES.c.case_count).where(
    SUITES.c.suite_sha256 == sa.bindparam("sha", type_=sa.Text())
)
# Item outcomes recorded since a time (an audit's): completions, failures and lost
# leases each append a history row stamped with when it finished. Cost: an
# index-only range scan of benchmark_campaign_attempts_finished (campaign_id,
# finished_at) over the rows after ``since``, cut at CHANGES_COUNTED entries, so
# at most a few milliseconds whatever the campaign's size; no item row is read.
CHANGES_SINCE = sa.select(sa.func.count()).select_from(
    sa.select(sa.literal(1).label("one"))
    .where(
        ATTEMPTS.c.campaign_id == _CID,
        ATTEMPTS.c.finished_at > sa.bindparam("since", type_=ATTEMPTS.c.finished_at.type),
    )
    .limit(CHANGES_COUNTED)
    .subquery()
)
RECORD_VERIFICATION = (
    sa.update(CAMPAIGNS)
    .where(CAMPAIGNS.c.campaign_id == _CID)
    .values(
        verified_at=sa.bindparam("verified_at", type_=CAMPAIGNS.c.verified_at.type),
        verified_ok=sa.bindparam("verified_ok", type_=sa.Boolean()),
        verified_problems=sa.bindparam("verified_problems", type_=sa.Integer()),
    )
)


# The audit's columns, in the order its rules read them (domain.campaign_audit.ITEM_COLUMNS).
_ITEM_COLUMNS = [WORK.c[name] for name in ITEM_COLUMNS]
_ITEM_STREAMS = {
    dialect: sa.select(*_ITEM_COLUMNS)
    .where(WORK.c.campaign_id == _CID)
    .order_by(*item_order(dialect))
    for dialect in ("sqlite", "postgresql")
}
_RESULT_STREAMS = {
    dialect: sa.select(WORK.c.result_json)
    .where(WORK.c.campaign_id == _CID)
    .order_by(*item_order(dialect))
    for dialect in ("sqlite", "postgresql")
}


_COMPILED: dict[tuple[str, str, Any], SQLCompiler] = {}


@contextmanager
def read_snapshot(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection in one read transaction that sees one snapshot of the database.

    SQLite's deferred read transaction (WAL) already does, without the write
    lock; PostgreSQL gets REPEATABLE READ (reads never block writers there).
    """
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            yield connection


class CampaignReads:
    """Read-only statements of one read transaction (see the module doc)."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection
        self.dialect = "postgresql" if connection.dialect.name == "postgresql" else "sqlite"

    def campaign(self, campaign_id: str) -> sa.Row[Any] | None:
        """The campaign row, its stored policy text and its stored suite's case count."""
        return self.connection.execute(CAMPAIGN_FACTS, {"cid": campaign_id}).first()

    def unfinished_counts(self, campaign_id: str) -> dict[Any, int]:
        """Items per status, for every status but succeeded (index-only ranges)."""
        rows = self.connection.execute(UNFINISHED_COUNTS, {"cid": campaign_id})
        return {row[0]: int(row[1]) for row in rows}

    def error_counts(self, campaign_id: str) -> dict[Any, int]:
        rows = self.connection.execute(ERROR_COUNTS, {"cid": campaign_id})
        return {row[0]: int(row[1]) for row in rows}

    def next_due(self, campaign_id: str) -> sa.Row[Any]:
        """Earliest due pending and retry_wait items, earliest lease expiry (3 seeks)."""
        return self.connection.execute(NEXT_DUE, {"cid": campaign_id}).one()

    def times(self, campaign_id: str) -> sa.Row[Any]:
        """Earliest due pending and retry_wait items, earliest and latest lease expiry."""
        return self.connection.execute(TIMES, {"cid": campaign_id}).one()

    def changes_since(self, campaign_id: str, since: float) -> int:
        """Item outcomes recorded after ``since``, up to :data:`CHANGES_COUNTED` (an
        index-only range of the attempt history; see ``CHANGES_SINCE``)."""
        params = {"cid": campaign_id, "since": since}
        return int(self.connection.execute(CHANGES_SINCE, params).scalar_one())

    def report_state(self, campaign_id: str) -> Any:
        """The report-finalization state row, or ``None``."""
        return self.connection.execute(REPORT_STATE_ROW, {"cid": campaign_id}).first()

    def report(self, campaign_id: str) -> Any:
        """The stored report row, or ``None``."""
        return self.connection.execute(REPORT_ROW, {"cid": campaign_id}).first()

    def has_report(self, campaign_id: str) -> bool:
        return self.connection.execute(HAS_REPORT, {"cid": campaign_id}).first() is not None

    def policy_json(self, policy_sha256: str) -> str | None:
        return self.connection.execute(POLICY_JSON, {"sha": policy_sha256}).scalar_one_or_none()

    def suite(self, suite_sha256: str) -> Any:
        return self.connection.execute(SUITE_JSON, {"sha": suite_sha256}).first()

    def _stream(self, statement: sa.Select[Any], campaign_id: str) -> Iterator[Sequence[Any]]:
        result = self.connection.execution_options(
            stream_results=True, yield_per=AUDIT_BATCH
        ).execute(statement, {"cid": campaign_id})
        try:
            yield from result.partitions()
        finally:
            result.close()

    def items(self, campaign_id: str) -> Iterator[Sequence[Any]]:
        """Every item row of the campaign (the columns of ``ITEM_COLUMNS``, as plain
        tuples), in batches, in code-point (locale, case) order.

        Read on the driver's own cursor in the same transaction (a server-side
        one on PostgreSQL): at 100,000 rows, building SQLAlchemy rows would cost
        as much as the database's work.
        """
        dialect = self.connection.dialect
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        compiled = _COMPILED.get(key)
        if compiled is None:
            compiled = _ITEM_STREAMS[self.dialect].compile(dialect=dialect)
            _COMPILED[key] = compiled
        params = compiled.construct_params({"cid": campaign_id})
        arguments: Any = (
            tuple(params[name] for name in compiled.positiontup or ())
            if compiled.positional
            else params
        )
        # The DBAPI connection, not the driver's own: under the asyncio extension it is
        # SQLAlchemy's adapter, whose cursor answers synchronously (awaited for us).
        driver = self.connection.connection.dbapi_connection
        assert driver is not None
        if self.dialect == "postgresql":
            cursor = driver.cursor("benchledger_audit_items")  # a named, server-side cursor
        else:
            cursor = driver.cursor()
        try:
            cursor.execute(str(compiled), arguments)
            while batch := cursor.fetchmany(AUDIT_BATCH):
                yield batch
        finally:
            cursor.close()

    def history(self, campaign_id: str) -> Iterator[Sequence[Any]]:
        """Every item (work id, status, attempts, history_from) with each of its history
        rows (attempt, outcome; NULLs for an item without any), in batches, in order."""
        return self._stream(_HISTORY, campaign_id)

    def stray_history(self, campaign_id: str) -> int:
        """History rows of the campaign whose work id is none of its items."""
        return int(self.connection.execute(_STRAY_HISTORY, {"cid": campaign_id}).scalar_one())

    def result_texts(self, campaign_id: str) -> Iterator[Sequence[Any]]:
        """Every item's stored result text, in batches, in the same order as :meth:`items`."""
        return self._stream(_RESULT_STREAMS[self.dialect], campaign_id)


# Every item with its history rows (none: one row of NULLs), item by item, in order.
_HISTORY = (
    sa.select(
        WORK.c.work_id,
        WORK.c.status,
        WORK.c.attempts,
        WORK.c.history_from,
        ATTEMPTS.c.attempt,
        ATTEMPTS.c.outcome,
    )
    .select_from(
        WORK.outerjoin(
            ATTEMPTS,
            sa.and_(
                ATTEMPTS.c.work_id == WORK.c.work_id,
                ATTEMPTS.c.campaign_id == WORK.c.campaign_id,
                # Said outright: the planner then reads only this campaign's history,
                # never the whole table's (which grows with every other campaign).
                ATTEMPTS.c.campaign_id == _CID,
            ),
        )
    )
    .where(WORK.c.campaign_id == _CID)
    .order_by(WORK.c.work_id, ATTEMPTS.c.attempt_id)
)
# History rows of the campaign that belong to none of its items.
# (An anti-join by the work table's primary key: one index probe per history row of
# this campaign, never a scan of every campaign's items.)
_STRAY_HISTORY = (
    sa.select(sa.func.count())
    .select_from(ATTEMPTS)
    .where(
        ATTEMPTS.c.campaign_id == _CID,
        ~sa.exists().where(
            WORK.c.work_id == ATTEMPTS.c.work_id,
            WORK.c.campaign_id == ATTEMPTS.c.campaign_id,
        ),
    )
)


def record_verification(
    connection: sa.Connection, campaign_id: str, verified_at: float, ok: bool, problems: int
) -> None:
    """Store the outcome of an integrity audit on the campaign row (a write transaction)."""
    connection.execute(
        RECORD_VERIFICATION,
        {
            "cid": campaign_id,
            "verified_at": verified_at,
            "verified_ok": ok,
            "verified_problems": problems,
        },
    )
