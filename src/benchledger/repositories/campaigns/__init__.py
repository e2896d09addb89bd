"""All SQL of benchmark campaigns: campaigns, their work items and their report.

Repositories run statements on the caller's session and never commit; the
service owns the transaction. The hot paths (claim, renew, complete, fail)
touch only rows they reach through an index:

- claim walks ``benchmark_campaign_claimable`` (claimable rows only, in claim
  order) and sweeps expired leases through ``benchmark_campaign_leases``;
- renew, complete and fail are one compare-and-set ``UPDATE`` by primary key
  that matches only the live lease of the claim's holder.

Every hot-path statement is built once, at import, with bound parameters
(:class:`~benchledger.db.Prebuilt`: compiled once per dialect) and runs on the
service's ``Connection`` (no ORM Session): the claim is one statement
(:data:`CLAIM`: the expiry sweep and the lease), renew, complete and fail one
each, plus the throttled campaign touch.

On PostgreSQL the claim's CTEs pick the expired leases and the next item with
``FOR UPDATE SKIP LOCKED`` (so concurrent workers never wait on, nor take, the
same row) and the ``UPDATE`` releases and leases them. On SQLite the write
transaction holds the database's write lock (``BEGIN IMMEDIATE``), which
serializes claimers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import Prebuilt, insert_if_absent
from benchledger.db import (  # consistent_snapshot: re-exported for the services
    consistent_snapshot as consistent_snapshot,
)
from benchledger.domain.campaign import (
    REPORT_CLAIMABLE,
    STATUSES,
    UNFINISHED,
    ReportStatus,
    WorkStatus,
)
from benchledger.domain.campaign_codes import LEASE_EXPIRED, REPORT_LEASE_EXPIRED
from benchledger.domain.integrity import result_seal
from benchledger.models.campaign import (
    CampaignRow,
    ClaimLogRow,
    ReportRow,
    ReportStateRow,
    StoredPolicyRow,
    StoredSuiteRow,
    WorkRow,
)
from benchledger.repositories.campaigns.predicates import (
    CLAIMABLE_WORK,
    LEASED_WORK,
)

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
CLAIMS = cast(sa.Table, ClaimLogRow.__table__)
WORK = cast(sa.Table, WorkRow.__table__)
REPORTS = cast(sa.Table, ReportRow.__table__)
REPORT_STATE = cast(sa.Table, ReportStateRow.__table__)
POLICIES = cast(sa.Table, StoredPolicyRow.__table__)
SUITES = cast(sa.Table, StoredSuiteRow.__table__)

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


# Leases swept per claim. A claim stays bounded even after a mass crash; the
# rest are swept by the next claims (each claim sweeps as it picks).
SWEEP_BATCH = 100

# The campaign row's updated_at moves at most once per this many seconds. On
# PostgreSQL every writer touching one row would queue on its row lock; the
# throttle (plus SKIP LOCKED, below) keeps the campaign row off the hot path.
PROGRESS_TOUCH_SECONDS = 1.0

WORK_OUTCOME_COLUMNS = (
    WORK.c.work_id,
    WORK.c.target_locale,
    WORK.c.suite_case_key,
    WORK.c.status,
    WORK.c.attempts,
    WORK.c.max_attempts,
    WORK.c.next_attempt_at,
    WORK.c.last_error_code,
    WORK.c.last_error_detail_hash,
    WORK.c.result_sha256,
)


def dialect_of(session: Session) -> str:
    return session.get_bind().dialect.name


# The indexes the hot paths depend on; a database missing one is refused, not slowed.
REQUIRED_WORK_INDEXES = frozenset(
    {"benchmark_campaign_ready", "benchmark_campaign_claimable", "benchmark_campaign_leases"}
)


def missing_work_indexes(connection: sa.Connection) -> set[str]:
    """Names of required indexes absent from ``benchmark_campaign_work``."""
    present = {str(index["name"]) for index in sa.inspect(connection).get_indexes(WORK.name)}
    return set(REQUIRED_WORK_INDEXES - present)


class CampaignRepository:
    """Campaign rows and the content-addressed policies and suites they bind."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, campaign_id: str) -> sa.Row[Any] | None:
        return self.session.execute(
            sa.select(CAMPAIGNS).where(CAMPAIGNS.c.campaign_id == campaign_id)
        ).first()

    def page(self, after: str | None, limit: int) -> Sequence[Any] | None:
        """Up to ``limit`` campaign rows in (created_at, campaign_id) order, after ``after``.

        ``None`` when ``after`` names no campaign. Campaigns are never deleted
        and their ``created_at`` never changes, so the order is stable and a
        cursor stays valid.
        """
        key = sa.tuple_(CAMPAIGNS.c.created_at, CAMPAIGNS.c.campaign_id)
        statement = sa.select(CAMPAIGNS).order_by(*key.clauses).limit(limit)
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
            )
        )

    def touch(self, campaign_id: str, now: float) -> None:
        """Move ``updated_at`` forward to ``now`` (throttled; never backwards, never waits)."""
        threshold = now - PROGRESS_TOUCH_SECONDS
        due = (
            sa.select(CAMPAIGNS.c.campaign_id)
            .where(CAMPAIGNS.c.campaign_id == campaign_id, CAMPAIGNS.c.updated_at <= threshold)
            # NO KEY UPDATE: does not conflict with the KEY SHARE locks of foreign keys.
            .with_for_update(skip_locked=True, key_share=True)
            .cte("due_campaign")
        )
        self.session.execute(
            sa.update(CAMPAIGNS)
            .where(CAMPAIGNS.c.campaign_id == due.c.campaign_id)
            .values(updated_at=now)
        )

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


_RELEASED = {"lease_owner": None, "lease_token": None, "lease_expires_at": None}


# -- the hot path: statements built once, executed on a Connection ----------------------------
#
# Claim, renew, complete and fail (of a work item and of the report) run these
# module-level statements with bound parameters: SQLAlchemy compiles each once
# per dialect (its compiled cache) and every call only binds values, with no
# expression building and no ORM Session. The parameters of a claim's live
# lease are named ``c_*`` (see :func:`live_lease_params`), the operation's time
# ``now``.


def _leased_values(table: sa.Table) -> dict[str, Any]:
    """A new lease, one more attempt. The leased row carries no error: the previous
    attempt's code and detail are cleared (the attempt count keeps the history)."""
    return {
        # A work item's and the report's lease statuses are the same values.
        "status": WorkStatus.LEASED.value,
        "attempts": table.c.attempts + 1,
        "lease_owner": sa.bindparam("owner"),
        "lease_token": sa.bindparam("token"),
        "lease_expires_at": sa.bindparam("expires_at", type_=table.c.lease_expires_at.type),
        "last_error_code": None,
        "last_error_detail_hash": None,
        "updated_at": sa.bindparam("now", type_=table.c.updated_at.type),
    }


def _expired_values(table: sa.Table, code: str) -> dict[str, Any]:
    """An expired lease released: due again now, or failed when its attempts are spent.

    The error is the expiry (``code``); a stale error detail goes with the lease.
    """
    c = table.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    return {
        "status": sa.case(
            (c.attempts >= c.max_attempts, WorkStatus.FAILED.value),
            else_=WorkStatus.RETRY_WAIT.value,
        ),
        "next_attempt_at": now,
        "last_error_code": code,
        "last_error_detail_hash": None,
        "updated_at": now,
        **_RELEASED,
    }


class _LeaseStatements:
    """The lease state machine's writes on one table, shared by work items and the report.

    Both tables carry the same lease columns (``status``, ``attempts``,
    ``max_attempts``, ``next_attempt_at``, ``lease_owner``, ``lease_token``,
    ``lease_expires_at``, ``last_error_code``, ``last_error_detail_hash``,
    ``updated_at``) and move through the same transitions. Each
    is one compare-and-set ``UPDATE`` by primary key that matches only the
    claim's live lease: the claim's row (``claimed_row``), still leased by the
    same holder and token for the same attempt, and not expired at ``now``.
    """

    def __init__(
        self,
        table: sa.Table,
        claimed_row: Sequence[sa.ColumnElement[bool]],
        outcome_columns: Sequence[sa.ColumnElement[Any]],
        completed: Mapping[str, Any],
    ) -> None:
        c = table.c
        now = sa.bindparam("now", type_=c.updated_at.type)
        live = [
            *claimed_row,
            c.status == WorkStatus.LEASED.value,
            c.attempts == sa.bindparam("c_attempt"),
            c.max_attempts == sa.bindparam("c_max_attempts"),
            c.lease_owner == sa.bindparam("c_owner"),
            c.lease_token == sa.bindparam("c_token"),
            c.lease_expires_at == sa.bindparam("c_expires_at", type_=c.lease_expires_at.type),
            c.lease_expires_at > now,
        ]
        self.renew = Prebuilt(
            sa.update(table)
            .where(*live)
            .values(
                lease_expires_at=sa.bindparam("expires_at", type_=c.lease_expires_at.type),
                updated_at=now,
            )
        )
        self.fail = Prebuilt(
            sa.update(table)
            .where(*live)
            .values(
                status=sa.bindparam("new_status"),
                next_attempt_at=sa.bindparam("next_attempt_at_", type_=c.next_attempt_at.type),
                last_error_code=sa.bindparam("code"),
                last_error_detail_hash=sa.bindparam("detail_hash"),
                updated_at=now,
                **_RELEASED,
            )
            .returning(*outcome_columns)
        )
        self.complete = Prebuilt(
            sa.update(table)
            .where(*live)
            .values(updated_at=now, **_RELEASED, **completed)
            .returning(*outcome_columns)
        )


def live_lease_params(claim: Any, now: float) -> dict[str, Any]:
    """The bound values that identify ``claim``'s live lease at ``now``."""
    return {
        "c_work_id": getattr(claim, "work_id", None),
        "c_campaign_id": claim.campaign_id,
        "c_locale": getattr(claim, "target_locale", None),
        "c_case": getattr(claim, "suite_case_key", None),
        "c_attempt": claim.attempt,
        "c_max_attempts": claim.max_attempts,
        "c_owner": claim.lease_owner,
        "c_token": claim.lease_token,
        "c_expires_at": claim.lease_expires_at,
        "now": now,
    }


class _LeaseRows:
    """Renew and fail of a claim's live lease, on the caller's Connection."""

    statements: ClassVar[_LeaseStatements]

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection

    def renew(self, claim: Any, now: float, expires_at: float) -> bool:
        """Extend the claim's live lease (one compare-and-set ``UPDATE``)."""
        params = live_lease_params(claim, now)
        params["expires_at"] = expires_at
        return self.statements.renew(self.connection, params).rowcount == 1

    def fail(
        self,
        claim: Any,
        now: float,
        *,
        status: str,
        next_attempt_at: float,
        code: str,
        detail_hash: str | None,
    ) -> sa.Row[Any] | None:
        """Record a failed attempt of the claim's live lease (``retry_wait`` or ``failed``)."""
        params = live_lease_params(claim, now)
        params.update(
            new_status=status,
            next_attempt_at_=next_attempt_at,
            code=code,
            detail_hash=detail_hash,
        )
        return self.statements.fail(self.connection, params).first()


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
        row = self.session.execute(
            sa.select(sa.func.min(WORK.c.max_attempts), sa.func.max(WORK.c.max_attempts)).where(
                WORK.c.campaign_id == campaign_id
            )
        ).one()
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
        params = {"cid": campaign_id}
        if self.session.execute(ANY_UNFINISHED, params).first() is not None:
            return True
        return self.session.execute(ANY_ODD_STATUS, params).first() is not None

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


# -- work items: the claim and the lease holder's transitions --------------------------------


# The campaign hands out work without a gate: not cancelled, no flow-control cap
# (revision 0008). A constant subquery by primary key, evaluated once per claim.
_UNGATED = sa.exists().where(
    CAMPAIGNS.c.campaign_id == sa.bindparam("cid"),
    CAMPAIGNS.c.cancelled_at.is_(None),
    CAMPAIGNS.c.max_concurrent_leases.is_(None),
    CAMPAIGNS.c.max_claims_per_minute.is_(None),
)


def _claim_conditions(*, gated: bool = False) -> list[Any]:
    """Which items of campaign ``:cid`` a claim may lease at ``:now``.

    To gate claims further (e.g. a campaign's cancel flag or a flow-control
    cap), add one condition here: the lease statement below is built from
    this list once, at import. The plain statement leases only from a
    campaign that is neither cancelled nor capped; ``gated`` builds the one a
    claim runs after it passed the campaign's gate under the campaign row's
    lock (``repositories.campaign_actions.claim_gate``).
    """
    return [
        WORK.c.campaign_id == sa.bindparam("cid"),
        CLAIMABLE_WORK,
        WORK.c.next_attempt_at <= sa.bindparam("now", type_=WORK.c.next_attempt_at.type),
        WORK.c.attempts < WORK.c.max_attempts,
        *(() if gated else (_UNGATED,)),
    ]


def _within_caps() -> list[Any]:
    """One more lease keeps campaign ``:cid`` within its caps at ``:now``: fewer live
    leases than ``:max_live`` and fewer claims since ``:since`` than ``:max_rate``
    (``NULL``: no such cap). Each count is an index range of at most its cap, or so.

    A statement of its own after the campaign row's lock, so on PostgreSQL its
    snapshot sees every lease and claim of the claimers that held the lock before.
    """
    now = sa.bindparam("now", type_=WORK.c.lease_expires_at.type)
    since = sa.bindparam("since", type_=CLAIMS.c.claimed_at.type)
    max_live = sa.bindparam("max_live", type_=sa.Integer())
    max_rate = sa.bindparam("max_rate", type_=sa.Integer())
    live = (
        sa.select(sa.func.count())
        .select_from(WORK)
        .where(
            WORK.c.campaign_id == sa.bindparam("cid"), LEASED_WORK, WORK.c.lease_expires_at > now
        )
        .correlate(None)  # its own rows, not the lease's
        .scalar_subquery()
    )
    recent = (
        sa.select(sa.func.count())
        .select_from(CLAIMS)
        .where(CLAIMS.c.campaign_id == sa.bindparam("cid"), CLAIMS.c.claimed_at > since)
        .scalar_subquery()
    )
    return [
        sa.or_(max_live.is_(None), live < max_live),
        sa.or_(max_rate.is_(None), recent < max_rate),
    ]


def _lease_next_gated() -> Any:
    """The lease of the first claimable item, for a claim that passed the campaign's gate
    (its row locked) if it stays within the caps (:func:`_within_caps`)."""
    next_item = (
        sa.select(WORK.c.work_id)
        .where(*_claim_conditions(gated=True), *_within_caps())
        .order_by(WORK.c.target_locale, WORK.c.suite_case_key)
        .limit(1)
        .with_for_update(skip_locked=True)
        .cte("next_item")
    )
    # No second status check on the UPDATE: PostgreSQL's row lock re-evaluates the CTE's
    # WHERE on the row's latest version (SKIP LOCKED skips rows being changed), SQLite's
    # write lock excludes every other writer; an extra filter would only tempt the
    # planner away from the primary key.
    return (
        sa.update(WORK)
        .where(WORK.c.work_id == next_item.c.work_id)
        .values(_leased_values(WORK))
        .returning(
            WORK.c.work_id,
            WORK.c.target_locale,
            WORK.c.suite_case_key,
            WORK.c.attempts,
            WORK.c.max_attempts,
        )
    )


LEASE_NEXT_GATED = Prebuilt(_lease_next_gated())


def _claim() -> Any:
    """The claim in one statement: the expiry sweep, and the lease of the next due item.

    ``expired_leases`` are up to ``SWEEP_BATCH`` leases that ran out (the leases
    index, soonest first); ``next_claimable`` is the first claimable item in claim
    order (the claimable index). The item leased (``next_item``) is the first, in
    claim order, of that one and the expired leases with attempts left, if the
    campaign has no gate (neither cancelled nor capped). The ``UPDATE`` leases it,
    as :func:`_leased_values`, and releases every other expired lease, as
    :func:`_expired_values`: exactly what a sweep followed by a lease leaves. An
    expired lease taken over is due now (``next_attempt_at``), as a swept one is.
    RETURNING says of each row whether it was an expired lease (``expired``).
    """
    c = WORK.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    expired = (
        sa.select(c.work_id, c.target_locale, c.suite_case_key, c.attempts, c.max_attempts)
        .where(
            c.campaign_id == sa.bindparam("cid"),
            LEASED_WORK,
            c.lease_expires_at <= now,
        )
        .order_by(c.lease_expires_at)
        .limit(SWEEP_BATCH)
        .with_for_update(skip_locked=True)
        .cte("expired_leases")
    )
    claimable = (
        sa.select(c.work_id, c.target_locale, c.suite_case_key)
        .where(*_claim_conditions(gated=True))
        .order_by(c.target_locale, c.suite_case_key)
        .limit(1)
        .with_for_update(skip_locked=True)
        .cte("next_claimable")
    )
    candidates = sa.union_all(
        sa.select(claimable.c.work_id, claimable.c.target_locale, claimable.c.suite_case_key),
        sa.select(expired.c.work_id, expired.c.target_locale, expired.c.suite_case_key).where(
            expired.c.attempts < expired.c.max_attempts
        ),
    ).subquery("candidates")
    next_item = (
        sa.select(candidates.c.work_id)
        .where(_UNGATED)
        .order_by(candidates.c.target_locale, candidates.c.suite_case_key)
        .limit(1)
        .cte("next_item")
    )
    chosen = c.work_id.in_(sa.select(next_item.c.work_id))
    was_expired = c.work_id.in_(sa.select(expired.c.work_id))
    leased = _leased_values(WORK)
    released = _expired_values(WORK, LEASE_EXPIRED)
    values: dict[str, Any] = {
        name: sa.case((chosen, leased[name]), else_=released[name])
        for name in ("status", "lease_owner", "lease_token", "lease_expires_at", "last_error_code")
    }
    values["attempts"] = sa.case((chosen, leased["attempts"]), else_=c.attempts)
    values["last_error_detail_hash"] = None
    values["updated_at"] = now
    # Swept and taken-over leases are due now; a claimable item keeps its due time.
    values["next_attempt_at"] = sa.case(
        (c.status == WorkStatus.LEASED.value, now), else_=c.next_attempt_at
    )
    return (
        sa.update(WORK)
        .where(
            c.work_id.in_(
                sa.union_all(sa.select(expired.c.work_id), sa.select(next_item.c.work_id))
            )
        )
        .values(values)
        .returning(
            c.work_id,
            c.target_locale,
            c.suite_case_key,
            c.status,
            c.attempts,
            c.max_attempts,
            was_expired.label("expired"),
        )
    )


CLAIM = Prebuilt(_claim())


class WorkLeases(_LeaseRows):
    """The hot path of work items on a Connection: claim, renew, complete, fail."""

    statements = _LeaseStatements(
        WORK,
        [
            WORK.c.work_id == sa.bindparam("c_work_id"),
            WORK.c.campaign_id == sa.bindparam("c_campaign_id"),
            WORK.c.target_locale == sa.bindparam("c_locale"),
            WORK.c.suite_case_key == sa.bindparam("c_case"),
        ],
        WORK_OUTCOME_COLUMNS,
        {
            "status": WorkStatus.SUCCEEDED.value,
            "last_error_code": None,
            "last_error_detail_hash": None,
            "result_json": sa.bindparam("result_json_"),
            "result_sha256": sa.bindparam("result_sha256_"),
            "result_seal": sa.bindparam("result_seal_"),
        },
    )

    def lease_next_gated(
        self,
        campaign_id: str,
        now: float,
        owner: str,
        token: str,
        expires_at: float,
        *,
        max_live: int | None,
        max_rate: int | None,
        since: float,
    ) -> sa.Row[Any] | None:
        """Lease the first due item in (locale, case key) order, for a claim that passed
        the campaign's gate under its row lock (``campaign_actions.claim_gate``), if
        one more lease keeps it within its caps (``None``: none).

        The order is the claimable index's, so on PostgreSQL it follows the
        columns' collation (code-point order under "C", SQLite's order); only
        which item comes next depends on it, never a result.
        """
        params = {
            "cid": campaign_id,
            "now": now,
            "owner": owner,
            "token": token,
            "expires_at": expires_at,
            "max_live": max_live,
            "max_rate": max_rate,
            "since": since,
        }
        return LEASE_NEXT_GATED(self.connection, params).first()

    def claim(
        self, campaign_id: str, now: float, owner: str, token: str, expires_at: float
    ) -> tuple[sa.Row[Any] | None, bool]:
        """Sweep expired leases and lease the next due item, in one statement (:data:`CLAIM`).

        Returns the leased row (``None``: nothing due, or the campaign has a gate) and
        whether an expired lease was released or taken over.
        """
        rows = CLAIM(
            self.connection,
            {
                "cid": campaign_id,
                "now": now,
                "owner": owner,
                "token": token,
                "expires_at": expires_at,
            },
        ).all()
        leased = next((row for row in rows if row.status == WorkStatus.LEASED), None)
        return leased, any(row.expired for row in rows)

    def complete(
        self, claim: Any, now: float, result_json: str, result_sha256: str
    ) -> sa.Row[Any] | None:
        """Store the result of the claim's live lease: the item succeeds."""
        params = live_lease_params(claim, now)
        params["result_json_"] = result_json
        params["result_sha256_"] = result_sha256
        # Binds the attempt count to the result: verify() recomputes it (domain.integrity).
        params["result_seal_"] = result_seal(
            claim.work_id, claim.attempt, claim.max_attempts, result_sha256
        )
        return self.statements.complete(self.connection, params).first()


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
                **_RELEASED,
            )
        )

    def report(self, campaign_id: str) -> sa.Row[Any] | None:
        return self.session.execute(
            sa.select(REPORTS).where(REPORTS.c.campaign_id == campaign_id)
        ).first()

    def has_report(self, campaign_id: str) -> bool:
        return (
            self.session.execute(
                sa.select(sa.literal(1)).where(REPORTS.c.campaign_id == campaign_id)
            ).first()
            is not None
        )

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
ATTEMPTS_RANGE = sa.select(
    sa.func.min(WORK.c.max_attempts), sa.func.max(WORK.c.max_attempts)
).where(WORK.c.campaign_id == _CID)
EXPIRE_REPORT_LEASE = (
    sa.update(REPORT_STATE)
    .where(
        REPORT_STATE.c.campaign_id == _CID,
        REPORT_STATE.c.status == ReportStatus.LEASED.value,
        REPORT_STATE.c.lease_expires_at
        <= sa.bindparam("now", type_=REPORT_STATE.c.lease_expires_at.type),
    )
    .values(_expired_values(REPORT_STATE, REPORT_LEASE_EXPIRED))
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
    .values(_leased_values(REPORT_STATE))
    .returning(REPORT_STATE.c.attempts, REPORT_STATE.c.max_attempts)
)
HAS_REPORT = sa.select(sa.literal(1)).where(REPORTS.c.campaign_id == _CID)


class ReportLeases(_LeaseRows):
    """The report-finalization lease on a Connection: claim, renew, complete, fail."""

    statements = _LeaseStatements(
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
        params = {"cid": campaign_id}
        if self.connection.execute(ANY_UNFINISHED, params).first() is not None:
            return True
        return self.connection.execute(ANY_ODD_STATUS, params).first() is not None

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
