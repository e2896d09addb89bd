"""The lease state machine and the claim: every statement a work item's claim runs.

A work item's claim reads this module and nothing else (docs/architecture.md, Walk 1):

- :data:`CLAIM`, one ``UPDATE ... RETURNING`` built once at import: it sweeps
  up to ``SWEEP_BATCH`` expired leases (``benchmark_campaign_leases``) and
  leases the first claimable item (``benchmark_campaign_claimable``, in claim
  order) of a campaign that has no gate, in one statement;
- :data:`LEASE_NEXT_GATED`, the lease of a claim that passed the gate of a cancelled
  or capped campaign (the gate itself: :mod:`.gate`);
- :class:`WorkLeases`: claim, renew, complete and fail of a work item, each
  one statement (renew, complete and fail a compare-and-set ``UPDATE`` by
  primary key that matches only the live lease of the claim's holder);
- the lease transitions the report's lease shares (:class:`LeaseStatements`,
  :class:`LeaseRows`, in :mod:`.lease_rows`, re-exported here;
  :class:`~benchledger.repositories.campaigns.reports.ReportLeases`).

A claim that released an expired lease also moves the campaign's ``updated_at``
(``store.touch_campaign``, throttled, through the service's ``context.touch``).

Every statement is built once, at import, with bound parameters
(:class:`~benchledger.db.Prebuilt`: compiled once per dialect) and runs on the
service's ``Connection`` (no ORM Session); nothing here commits. On PostgreSQL
the claim's CTEs pick rows ``FOR UPDATE SKIP LOCKED`` (concurrent workers never
wait on, nor take, the same row); on SQLite the write transaction holds the
database's write lock (``BEGIN IMMEDIATE``), which serializes claimers.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final, cast

import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_codes import LEASE_EXPIRED, LEASE_LOSSES_SPENT
from benchledger.domain.integrity import result_seal
from benchledger.models.campaign import WorkRow
from benchledger.repositories.campaigns.attempts import (
    complete_recorded,
    record_attempt,
    record_lost_leases,
    record_successes,
)
from benchledger.repositories.campaigns.completions import WORK_OUTCOME_COLUMNS, complete_many
from benchledger.repositories.campaigns.gate import (
    CAMPAIGNS,
    CLAIMS,
    USAGE,
    Gate,
    group_capped,
)
from benchledger.repositories.campaigns.lease_rows import (
    RELEASED,
    LeaseRows,
    LeaseStatements,
    expired_values,
    leased_values,
    live_lease_params,
    losses_spent,
)
from benchledger.repositories.campaigns.predicates import CLAIMABLE_WORK, LEASED_WORK

WORK = cast(sa.Table, WorkRow.__table__)

__all__ = [
    "CLAIM",
    "GENERIC_PLANS",
    "LEASE_NEXT_GATED",
    "RELEASED",
    "WORK",
    "WORK_OUTCOME_COLUMNS",
    "LeaseRows",
    "LeaseStatements",
    "WorkLeases",
    "claims_batched",
    "expired_values",
    "leased_values",
    "live_lease_params",
    "losses_spent",
]

# Leases swept per claim: bounded after a mass crash; the next claims sweep the rest.
SWEEP_BATCH = 100


def _rows(n: int) -> sa.ColumnElement[int]:
    """``LIMIT n`` written into the statement's text, not bound: a claim runs on its
    prepared statement's one plan (:func:`plan_once`), which must know how few rows it
    takes; for a bound LIMIT PostgreSQL's plan reckons with a tenth of the rows, and
    may sort them all instead of reading the first few in index order."""
    return sa.literal_column(str(int(n)), sa.Integer())


# -- work items: the claim and the lease holder's transitions --------------------------------


# The campaign hands out work without a gate: not cancelled, no flow-control cap
# (revision 0008), and its limit group (if any) has none (revision 0013). A constant
# subquery by primary key, evaluated once per claim.
_UNGATED = sa.exists().where(
    CAMPAIGNS.c.campaign_id == sa.bindparam("cid"),
    CAMPAIGNS.c.cancelled_at.is_(None),
    CAMPAIGNS.c.max_concurrent_leases.is_(None),
    CAMPAIGNS.c.max_claims_per_minute.is_(None),
    ~group_capped(),
)


def _claim_conditions(*, gated: bool = False) -> list[Any]:
    """Which items of campaign ``:cid`` a claim may lease at ``:now``.

    To gate claims further (e.g. a campaign's cancel flag or a flow-control
    cap), add one condition here: the lease statement below is built from
    this list once, at import. The plain statement leases only from a
    campaign that is neither cancelled nor capped; ``gated`` builds the one a
    claim runs after it passed the campaign's gate under the campaign row's
    lock (:func:`claim_gate`).
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
    leases than ``:max_live`` and fewer claims since ``:since`` than ``:max_rate``;
    and its limit group ``:group`` within the group's: fewer live leases over all its
    campaigns than ``:group_max_live``, fewer claims since ``:since`` than
    ``:group_max_rate`` and fewer cost units reported since than ``:group_max_cost``
    (``NULL``: no such cap). Each count is an index range of at most its cap, or so.

    A statement of its own after the locks of the gate, so on PostgreSQL its
    snapshot sees every lease and claim of the claimers that held them before.
    """
    now = sa.bindparam("now", type_=WORK.c.lease_expires_at.type)
    since = sa.bindparam("since", type_=CLAIMS.c.claimed_at.type)
    group = sa.bindparam("group", type_=sa.Text())

    def cap(name: str) -> sa.BindParameter[int]:
        return sa.bindparam(name, type_=sa.Integer())

    def live(*campaigns: Any) -> Any:
        return (
            sa.select(sa.func.count())
            .select_from(WORK)
            .where(*campaigns, LEASED_WORK, WORK.c.lease_expires_at > now)
            .correlate(None)  # its own rows, not the lease's
            .scalar_subquery()
        )

    recent = (
        sa.select(sa.func.count())
        .select_from(CLAIMS)
        .where(CLAIMS.c.campaign_id == sa.bindparam("cid"), CLAIMS.c.claimed_at > since)
        .scalar_subquery()
    )
    in_group = WORK.c.campaign_id.in_(
        sa.select(CAMPAIGNS.c.campaign_id).where(CAMPAIGNS.c.limit_group == group)
    )

    def used(column: sa.ColumnElement[int]) -> Any:
        return (
            sa.select(sa.func.coalesce(sa.func.sum(column), 0))
            .where(USAGE.c.group_key == group, USAGE.c.used_at > since)
            .scalar_subquery()
        )

    return [
        sa.or_(
            cap("max_live").is_(None),
            live(WORK.c.campaign_id == sa.bindparam("cid")) < cap("max_live"),
        ),
        sa.or_(cap("max_rate").is_(None), recent < cap("max_rate")),
        sa.or_(cap("group_max_live").is_(None), live(in_group) < cap("group_max_live")),
        sa.or_(cap("group_max_rate").is_(None), used(USAGE.c.claims) < cap("group_max_rate")),
        sa.or_(cap("group_max_cost").is_(None), used(USAGE.c.cost_units) < cap("group_max_cost")),
    ]


def _lease_next_gated() -> Any:
    """The lease of the first claimable item, for a claim that passed the campaign's gate
    (its row locked) if it stays within the caps (:func:`_within_caps`)."""
    next_item = (
        sa.select(WORK.c.work_id)
        .where(*_claim_conditions(gated=True), *_within_caps())
        .order_by(WORK.c.target_locale, WORK.c.suite_case_key)
        .limit(_rows(1))
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
        .values(leased_values(WORK))
        .returning(
            WORK.c.work_id,
            WORK.c.target_locale,
            WORK.c.suite_case_key,
            WORK.c.attempts,
            WORK.c.max_attempts,
            WORK.c.throttles,
        )
    )


LEASE_NEXT_GATED = Prebuilt(_lease_next_gated())


def _claim(*, batch: int | None = None) -> Any:
    """The claim in one statement: the expiry sweep, and the lease of the next due item
    (``batch``: of up to that many due items, each lease's token ``:token.<work_id>``).

    ``expired_leases`` are up to ``SWEEP_BATCH`` leases that ran out (the leases
    index, soonest first); ``next_claimable`` is the first claimable item in claim
    order (the claimable index). The item leased (``next_item``) is the first, in
    claim order, of that one and the expired leases with attempts left, if the
    campaign has no gate (neither cancelled nor capped). The ``UPDATE`` leases it,
    as :func:`leased_values`, and releases every other expired lease, as
    :func:`expired_values`: exactly what a sweep followed by a lease leaves. An
    expired lease taken over is due now (``next_attempt_at``), as a swept one is.
    RETURNING says of each row whether it was an expired lease (``expired``).
    """
    c = WORK.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    # The lost lease's holder, start and expiry, as they were before this statement:
    # the attempt history records them (MATERIALIZED: SQLite, too, reads them once,
    # before the update, as PostgreSQL's CTEs always do).
    expired = (
        sa.select(
            c.work_id,
            c.target_locale,
            c.suite_case_key,
            c.attempts,
            c.max_attempts,
            c.lease_losses,
            c.max_lease_losses,
            c.lease_owner,
            c.leased_at,
            c.lease_expires_at,
        )
        .where(
            c.campaign_id == sa.bindparam("cid"),
            LEASED_WORK,
            c.lease_expires_at <= now,
        )
        .order_by(c.lease_expires_at)
        .limit(_rows(SWEEP_BATCH))
        .with_for_update(skip_locked=True)
        .cte("expired_leases")
        .prefix_with("MATERIALIZED")
    )
    claimable = (
        sa.select(c.work_id, c.target_locale, c.suite_case_key)
        .where(*_claim_conditions(gated=True))
        .order_by(c.target_locale, c.suite_case_key)
        .limit(_rows(batch or 1))
        .with_for_update(skip_locked=True)
        .cte("next_claimable")
    )
    candidates = sa.union_all(
        sa.select(claimable.c.work_id, claimable.c.target_locale, claimable.c.suite_case_key),
        sa.select(expired.c.work_id, expired.c.target_locale, expired.c.suite_case_key).where(
            expired.c.lease_losses + 1 < expired.c.max_lease_losses
        ),
    ).subquery("candidates")
    next_item = (
        sa.select(candidates.c.work_id)
        .where(_UNGATED)
        .order_by(candidates.c.target_locale, candidates.c.suite_case_key)
        .limit(_rows(batch or 1))
        .cte("next_item")
    )
    chosen = c.work_id.in_(sa.select(next_item.c.work_id))
    was_expired = c.work_id.in_(sa.select(expired.c.work_id))
    leased = leased_values(WORK)
    if batch:  # one claim, many leases: each its own token (the claim's, dot, the item's id)
        leased["lease_token"] = sa.bindparam("token", type_=sa.Text()) + "." + c.work_id
    released = expired_values(WORK, LEASE_EXPIRED, LEASE_LOSSES_SPENT)
    values: dict[str, Any] = {
        name: sa.case((chosen, leased[name]), else_=released[name])
        for name in ("status", "lease_owner", "lease_token", "lease_expires_at", "last_error_code")
    }
    # A lease taken over gives the lost attempt back and charges the new one: the count
    # stays; a lease only released gives it back (released["attempts"]).
    values["attempts"] = sa.case(
        (sa.and_(chosen, was_expired), c.attempts),
        (chosen, leased["attempts"]),
        else_=released["attempts"],
    )
    values["lease_losses"] = sa.case((was_expired, released["lease_losses"]), else_=c.lease_losses)
    values["leased_at"] = sa.case((chosen, leased["leased_at"]), else_=c.leased_at)
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
            c.throttles,
            c.lease_token,
            was_expired.label("expired"),
            *(
                sa.select(expired.c[name])
                # Qualified: RETURNING renders the table's columns bare, which inside the
                # subquery would name the CTE's own work_id.
                .where(expired.c.work_id == sa.literal_column(f"{WORK.name}.work_id"))
                .scalar_subquery()
                .label(label)
                for name, label in (
                    ("attempts", "lost_attempt"),
                    ("lease_owner", "lost_owner"),
                    ("leased_at", "lost_leased_at"),
                    ("lease_expires_at", "lost_expires_at"),
                )
            ),
        )
    )


CLAIM = Prebuilt(_claim())


#: What :func:`plan_once` runs (the benchmarks' bare loop of these statements, too).
GENERIC_PLANS: Final = "SET LOCAL plan_cache_mode = force_generic_plan"


def plan_once(connection: sa.Connection) -> None:
    """PostgreSQL: the claims of this transaction run on the plan their prepared statement
    made once, not on a plan made again for each execution (0.3-0.4 ms of the server's
    time per claim, more than its execution). PostgreSQL keeps planning a prepared
    statement anew while the one plan for any values looks dearer than the plans for
    the values given, and the claim's mostly did. Nothing to do where no statement is
    prepared (SQLite, PgBouncer's transaction pooling)."""
    if connection.dialect.name != "postgresql":
        return
    if getattr(connection.connection.driver_connection, "prepare_threshold", None) is None:
        return
    connection.exec_driver_sql(GENERIC_PLANS)


@functools.cache
def claims_batched(n: int) -> Prebuilt:
    """:data:`CLAIM` leasing up to ``n`` items (a worker's lanes fill a buffer with it);
    one statement per ``n``, its limit in its text (:func:`_rows`)."""
    return Prebuilt(_claim(batch=n))


class WorkLeases(LeaseRows):
    """The hot path of work items on a Connection: claim, renew, complete, fail."""

    statements = LeaseStatements(
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
        gate: Gate,
        since: float,
    ) -> sa.Row[Any] | None:
        """Lease the first due item in (locale, case key) order, for a claim that passed
        the campaign's gate under its locks (:func:`claim_gate`), if one more lease
        keeps the campaign and its limit group within their caps.

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
            "max_live": gate.max_live,
            "max_rate": gate.max_rate,
            "group": gate.group,
            "group_max_live": gate.group_max_live,
            "group_max_rate": gate.group_max_rate,
            "group_max_cost": gate.group_max_cost,
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
        plan_once(self.connection)
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
        swept = any(row.expired for row in rows)
        if swept:
            record_lost_leases(self.connection, campaign_id, rows)
        return leased, swept

    def claim_batch(
        self, campaign_id: str, now: float, owner: str, token: str, expires_at: float, n: int
    ) -> tuple[list[sa.Row[Any]], bool]:
        """:meth:`claim` of up to ``n`` items in one statement (:func:`claims_batched`), in
        claim order; each row's ``lease_token`` is its own (``token.<work_id>``)."""
        plan_once(self.connection)
        rows = claims_batched(n)(
            self.connection,
            {
                "cid": campaign_id,
                "now": now,
                "owner": owner,
                "token": token,
                "expires_at": expires_at,
            },
        ).all()
        leased = sorted(
            (row for row in rows if row.status == WorkStatus.LEASED),
            key=lambda row: (row.target_locale, row.suite_case_key),
        )
        swept = any(row.expired for row in rows)
        if swept:
            record_lost_leases(self.connection, campaign_id, rows)
        return leased, swept

    def complete(
        self,
        claim: Any,
        now: float,
        result_json: str,
        result_sha256: str,
        duration_seconds: float | None = None,
    ) -> sa.Row[Any] | None:
        """Store the result of the claim's live lease: the item succeeds (and the
        attempt's row is added to the history, in the same transaction)."""
        params = self._completion_params(claim, now, result_json, result_sha256)
        if self.connection.dialect.name == "postgresql":  # one statement does both
            return complete_recorded(
                self.connection, self.statements.complete, params, claim, duration_seconds
            )
        row = self.statements.complete(self.connection, params).first()
        if row is not None:
            outcome = AttemptOutcome.SUCCEEDED
            record_attempt(self.connection, claim, now, outcome, None, duration_seconds)
        return row

    @staticmethod
    def _completion_params(
        claim: Any, now: float, result_json: str, result_sha256: str
    ) -> dict[str, Any]:
        params = live_lease_params(claim, now)
        params["result_json_"] = result_json
        params["result_sha256_"] = result_sha256
        # Binds the attempt count to the result: verify() recomputes it (domain.integrity).
        params["result_seal_"] = result_seal(
            claim.work_id, claim.attempt, claim.max_attempts, result_sha256
        )
        return params

    def complete_many(
        self, entries: Sequence[tuple[Any, str, str, float | None]], now: float
    ) -> list[sa.Row[Any] | None]:
        """:meth:`complete` of each ``(claim, result_json, result_sha256, duration)``, in
        order, as if one after another, in one statement (:func:`~.completions.complete_many`;
        a work id seen twice completes once, and its later entries then find no live
        lease). On SQLite the written ones' history rows follow in one ``executemany``."""
        if len(entries) < 2:
            return [self.complete(c, now, text, sha, took) for c, text, sha, took in entries]
        first: dict[str, int] = {}
        for index, entry in enumerate(entries):
            first.setdefault(entry[0].work_id, index)
        distinct = [entries[i] for i in first.values()]
        written = complete_many(self.connection, distinct, now)
        if self.connection.dialect.name != "postgresql":
            recorded = [(c, took) for c, _, _, took in distinct if c.work_id in written]
            record_successes(self.connection, recorded, now)
        return [
            written.get(c.work_id)
            if first[c.work_id] == index
            else self.complete(c, now, text, sha, took)
            for index, (c, text, sha, took) in enumerate(entries)
        ]

    def fail(
        self,
        claim: Any,
        now: float,
        *,
        status: str,
        next_attempt_at: float,
        code: str,
        detail_hash: str | None,
        duration_seconds: float | None = None,
    ) -> sa.Row[Any] | None:
        """Record a failed attempt of the claim's live lease, and its row in the history."""
        row = super().fail(
            claim,
            now,
            status=status,
            next_attempt_at=next_attempt_at,
            code=code,
            detail_hash=detail_hash,
        )
        if row is not None:
            outcome = (
                AttemptOutcome.FAILED
                if status == WorkStatus.FAILED
                else AttemptOutcome.RETRY_SCHEDULED
            )
            record_attempt(self.connection, claim, now, outcome, code, duration_seconds)
        return row
