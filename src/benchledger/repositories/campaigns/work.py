"""Work items, one per (target locale x suite case) of a campaign: their insert and reads.

:class:`WorkRepository` runs on the caller's session and never commits. A work
item's lease (claim, renew, complete, fail) is not here: it is
:class:`~benchledger.repositories.campaigns.leases.WorkLeases`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.domain.campaign import STATUSES, UNFINISHED, WorkStatus
from benchledger.models.campaign import WorkRow
from benchledger.repositories.campaigns.predicates import LEASED_WORK

WORK = cast(sa.Table, WorkRow.__table__)

# Whether a campaign has an item not succeeded (through the ready index's status
# column); anything outside the five statuses (only by hand) is unfinished too.
ANY_UNFINISHED = (
    sa.select(sa.literal(1))
    .where(WORK.c.campaign_id == sa.bindparam("cid"), WORK.c.status.in_(UNFINISHED))
    .limit(1)
)
ANY_ODD_STATUS = (
    sa.select(sa.literal(1))
    .where(
        WORK.c.campaign_id == sa.bindparam("cid"),
        sa.or_(WORK.c.status.is_(None), WORK.c.status.not_in(STATUSES)),
    )
    .limit(1)
)

#: The (min, max) of the items' ``max_attempts``.
ATTEMPTS_RANGE = sa.select(
    sa.func.min(WORK.c.max_attempts), sa.func.max(WORK.c.max_attempts)
).where(WORK.c.campaign_id == sa.bindparam("cid"))


def has_unfinished(executor: Session | sa.Connection, campaign_id: str) -> bool:
    """Whether any item is not succeeded (through the ready index's status column)."""
    params = {"cid": campaign_id}
    if executor.execute(ANY_UNFINISHED, params).first() is not None:
        return True
    return executor.execute(ANY_ODD_STATUS, params).first() is not None


#: How long :func:`analyze_work` waits for its lock (a running VACUUM holds it) before
#: it gives up: the statistics are a help, never worth stalling a write for.
ANALYZE_LOCK_TIMEOUT = "2s"


def analyze_work(connection: sa.Connection) -> None:
    """PostgreSQL: refresh the planner's statistics of the items' campaign and status, in
    the caller's transaction (``lock_timeout`` :data:`ANALYZE_LOCK_TIMEOUT`).

    Until ANALYZE samples a new campaign, the planner takes it for one row, and
    any index that starts with the campaign looks as good as any other: the
    claim's sweep of expired leases then read every item of the campaign through
    the items-in-order index instead of the few leased ones (6-8 ms a claim at
    10,000 items, against 1.1 ms, and more with every item). Autovacuum analyzes
    the table only once a tenth of it changed.
    """
    connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{ANALYZE_LOCK_TIMEOUT}'")
    connection.exec_driver_sql(f"ANALYZE {WORK.name} (campaign_id, status)")


# The indexes the hot paths depend on; a database missing one is refused, not slowed.
REQUIRED_WORK_INDEXES = frozenset(
    {"benchmark_campaign_ready", "benchmark_campaign_claimable", "benchmark_campaign_leases"}
)


def missing_work_indexes(connection: sa.Connection) -> set[str]:
    """Names of required indexes absent from ``benchmark_campaign_work``."""
    present = {str(index["name"]) for index in sa.inspect(connection).get_indexes(WORK.name)}
    return set(REQUIRED_WORK_INDEXES - present)


def _in_item_order(rows: Sequence[Any]) -> list[Any]:
    """Rows in (target locale, suite case key) order by code point.

    That is SQLite's BINARY collation order on every backend: a
    report binds its results in this order (``results_sha256``), so it must not
    depend on a PostgreSQL collation (en_US, ICU), nor change with one. The
    ORDER BY only makes Python's sort cheap (the rows come nearly sorted).
    """
    return sorted(rows, key=lambda row: (str(row.target_locale), str(row.suite_case_key)))


# Rows per executemany of create(): bounds the memory of a large campaign's insert.
INSERT_BATCH = 10_000
_NOW = sa.bindparam("now", type_=WORK.c.created_at.type)
_INSERT_PENDING = sa.insert(WORK).values(
    work_id=sa.bindparam("work_id"),
    campaign_id=sa.bindparam("campaign_id"),
    target_locale=sa.bindparam("target_locale"),
    suite_case_key=sa.bindparam("suite_case_key"),
    status=sa.literal_column(f"'{WorkStatus.PENDING.value}'"),
    attempts=sa.literal_column("0"),
    max_attempts=sa.bindparam("max_attempts"),
    max_throttles=sa.bindparam("max_throttles"),
    next_attempt_at=_NOW,
    created_at=_NOW,
    updated_at=_NOW,
)


class WorkRepository:
    """Work items: one per (target locale x suite case) of a campaign (the hot path's
    writes are :class:`WorkLeases`)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # -- create / binding ------------------------------------------------------

    def insert_pending(
        self,
        campaign_id: str,
        items: Iterable[tuple[str, str, str]],
        max_attempts: int,
        now: float,
        max_throttles: int,
    ) -> None:
        """Insert every item pending, in batches of ``INSERT_BATCH`` rows.

        Each batch is one DB-API ``executemany`` of the INSERT compiled once
        for the dialect (sqlite3 steps one prepared statement; psycopg
        pipelines the rows): no per-row parameter processing in SQLAlchemy.
        """
        connection = self.session.connection()
        compiled = _INSERT_PENDING.compile(dialect=connection.dialect)
        order = compiled.positiontup
        batch: list[Any] = []
        for work_id, locale, case_key in items:
            row = {
                "work_id": work_id,
                "campaign_id": campaign_id,
                "target_locale": locale,
                "suite_case_key": case_key,
                "max_attempts": max_attempts,
                "max_throttles": max_throttles,
                "now": now,
            }
            batch.append(tuple(row[key] for key in order) if order is not None else row)
            if len(batch) == INSERT_BATCH:
                connection.exec_driver_sql(compiled.string, batch)
                batch = []
        if batch:
            connection.exec_driver_sql(compiled.string, batch)

    def identities(self, campaign_id: str) -> set[tuple[str, str, str]]:
        rows = self.session.execute(
            sa.select(WORK.c.work_id, WORK.c.target_locale, WORK.c.suite_case_key).where(
                WORK.c.campaign_id == campaign_id
            )
        )
        return {(row[0], row[1], row[2]) for row in rows}

    def attempts_range(self, campaign_id: str) -> tuple[Any, Any]:
        row = self.session.execute(ATTEMPTS_RANGE, {"cid": campaign_id}).one()
        return row[0], row[1]

    # -- reads ------------------------------------------------------------------------

    def status_counts(self, campaign_id: str) -> dict[Any, int]:
        rows = self.session.execute(
            sa.select(WORK.c.status, sa.func.count())
            .where(WORK.c.campaign_id == campaign_id)
            .group_by(WORK.c.status)
        )
        return {row[0]: int(row[1]) for row in rows}

    def error_counts(self, campaign_id: str) -> dict[Any, int]:
        rows = self.session.execute(
            sa.select(WORK.c.last_error_code, sa.func.count())
            .where(WORK.c.campaign_id == campaign_id, WORK.c.last_error_code.is_not(None))
            .group_by(WORK.c.last_error_code)
            .order_by(WORK.c.last_error_code)
        )
        return {row[0]: int(row[1]) for row in rows}

    def next_due_at(self, campaign_id: str) -> float | None:
        """The earliest time an unfinished item may be claimed; ``None`` if none is unfinished.

        The earliest ``next_attempt_at`` of the pending and of the retry_wait
        items, and the earliest lease expiry of the leased items: one MIN per
        status, each an index seek (the ready index for the first two, the
        leases index for the third), however large the campaign.
        """

        def earliest(column: sa.ColumnElement[Any], status: Any) -> Any:
            # MIN() as ORDER BY ... LIMIT 1: the index's order serves it, whatever the
            # planner's statistics say (a MIN() may be planned as an aggregate over rows).
            return (
                sa.select(column)
                .where(WORK.c.campaign_id == campaign_id, status, column.is_not(None))
                .order_by(column)
                .limit(1)
                .scalar_subquery()
            )

        row = self.session.execute(
            sa.select(
                earliest(WORK.c.next_attempt_at, WORK.c.status == WorkStatus.PENDING.value),
                earliest(WORK.c.next_attempt_at, WORK.c.status == WorkStatus.RETRY_WAIT.value),
                earliest(WORK.c.lease_expires_at, LEASED_WORK),
            )
        ).one()
        return min((float(value) for value in row if value is not None), default=None)

    def has_unfinished(self, campaign_id: str) -> bool:
        """Whether any item is not succeeded (through the ready index's status column)."""
        return has_unfinished(self.session, campaign_id)

    def all_rows(self, campaign_id: str) -> Sequence[Any]:
        return _in_item_order(
            self.session.execute(
                sa.select(WORK)
                .where(WORK.c.campaign_id == campaign_id)
                .order_by(WORK.c.target_locale, WORK.c.suite_case_key)
            ).all()
        )

    def results(self, campaign_id: str) -> Sequence[Any]:
        """Every item's result, in item order (see :func:`_in_item_order`)."""
        return _in_item_order(
            self.session.execute(
                sa.select(
                    WORK.c.work_id,
                    WORK.c.target_locale,
                    WORK.c.suite_case_key,
                    WORK.c.status,
                    WORK.c.result_json,
                    WORK.c.result_sha256,
                )
                .where(WORK.c.campaign_id == campaign_id)
                .order_by(WORK.c.target_locale, WORK.c.suite_case_key)
            ).all()
        )

    def result_digests(self, campaign_id: str) -> list[Any]:
        """Every item's result sha256, in item order."""
        rows = self.session.execute(
            sa.select(WORK.c.target_locale, WORK.c.suite_case_key, WORK.c.result_sha256)
            .where(WORK.c.campaign_id == campaign_id)
            .order_by(WORK.c.target_locale, WORK.c.suite_case_key)
        ).all()
        return [row.result_sha256 for row in _in_item_order(rows)]
