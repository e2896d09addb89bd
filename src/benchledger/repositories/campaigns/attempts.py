"""The attempt history's writes: one row per attempt, with the outcome it records.

Each is written in the transaction of the outcome it records, on the lease's
Connection: a completion or failure adds its attempt's row (one ``INSERT ...
SELECT``, whose start is the item's ``leased_at``), a claim whose sweep found
expired leases adds a ``lease_expired`` row for each (only then: a claim that
found none runs nothing more). Nothing here updates or deletes a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign_codes import LEASE_EXPIRED
from benchledger.models.campaign import AttemptRow, WorkRow

WORK = cast(sa.Table, WorkRow.__table__)
ATTEMPTS = cast(sa.Table, AttemptRow.__table__)

#: A history row's columns (all but its key), in the order the INSERT ... SELECTs give them.
ROW_COLUMNS = [column.name for column in ATTEMPTS.c if column.name != "attempt_id"]

#: An attempt that ended with an outcome recorded by its holder (complete or fail): its
#: start is the item's ``leased_at``, so the row needs no read before it.
RECORD_ATTEMPT = Prebuilt(
    sa.insert(ATTEMPTS).from_select(
        ROW_COLUMNS,
        sa.select(
            WORK.c.campaign_id,
            WORK.c.work_id,
            sa.bindparam("a_attempt", type_=sa.Integer()),
            sa.bindparam("a_worker", type_=sa.Text()),
            WORK.c.leased_at,
            sa.bindparam("now", type_=ATTEMPTS.c.finished_at.type),
            sa.bindparam("a_outcome", type_=sa.Text()),
            sa.bindparam("a_code", type_=sa.Text()),
            sa.bindparam("a_duration", type_=ATTEMPTS.c.duration_seconds.type),
        ).where(WORK.c.work_id == sa.bindparam("c_work_id", type_=sa.Text())),
    )
)
#: Attempts whose lease expired unrenewed, found by a claim's sweep.
RECORD_LOST = sa.insert(ATTEMPTS)


def record_lost_leases(connection: sa.Connection, campaign_id: str, rows: Sequence[Any]) -> int:
    """Record the attempts a claim's sweep found lost (its rows with ``expired``)."""
    lost = [
        {
            "campaign_id": campaign_id,
            "work_id": row.work_id,
            "attempt": row.lost_attempt,
            "worker_id": row.lost_owner,
            "claimed_at": row.lost_leased_at,
            "finished_at": row.lost_expires_at,
            "outcome": AttemptOutcome.LEASE_EXPIRED.value,
            "error_code": LEASE_EXPIRED,
            "duration_seconds": None,
        }
        for row in rows
        if row.expired and row.lost_attempt is not None and row.lost_attempt >= 1
    ]
    if lost:
        connection.execute(RECORD_LOST, lost)
    return len(lost)


def record_attempt(
    connection: sa.Connection,
    claim: Any,
    now: float,
    outcome: AttemptOutcome,
    code: str | None,
    duration_seconds: float | None,
) -> None:
    """Add the row of the claim's attempt, which ended at ``now`` with ``outcome``."""
    RECORD_ATTEMPT(connection, _attempt_row(claim, now, outcome, code, duration_seconds))


def record_successes(
    connection: sa.Connection, claims: Sequence[tuple[Any, float | None]], now: float
) -> None:
    """:func:`record_attempt` of each ``(claim, duration)`` that succeeded at ``now``, in
    order, in one ``executemany``."""
    if claims:
        RECORD_ATTEMPT.many(
            connection,
            [
                _attempt_row(claim, now, AttemptOutcome.SUCCEEDED, None, duration)
                for claim, duration in claims
            ],
        )


def _attempt_row(
    claim: Any,
    now: float,
    outcome: AttemptOutcome,
    code: str | None,
    duration_seconds: float | None,
) -> dict[str, Any]:
    return {
        "c_work_id": claim.work_id,
        "a_attempt": claim.attempt,
        "a_worker": claim.lease_owner,
        "now": now,
        "a_outcome": outcome.value,
        "a_code": code,
        "a_duration": duration_seconds,
    }


#: The completion statement of each lease table, with its history row added (PostgreSQL).
_RECORDED: dict[int, Prebuilt] = {}


def _recorded(complete: Prebuilt) -> Prebuilt:
    """``complete`` (an ``UPDATE ... RETURNING``) and the attempt's history row in one
    statement: the update as a data-modifying CTE whose row feeds the ``INSERT``."""
    done = cast(Any, complete.statement).cte("done")  # it returns campaign_id, leased_at
    recorded = (
        sa.insert(ATTEMPTS)
        .from_select(
            ROW_COLUMNS,
            sa.select(
                done.c.campaign_id,
                done.c.work_id,
                sa.bindparam("a_attempt", type_=sa.Integer()),
                sa.bindparam("a_worker", type_=sa.Text()),
                done.c.leased_at,
                sa.bindparam("now", type_=ATTEMPTS.c.finished_at.type),
                sa.literal(AttemptOutcome.SUCCEEDED.value),
                sa.null(),
                sa.bindparam("a_duration", type_=ATTEMPTS.c.duration_seconds.type),
            ),
        )
        .cte("recorded")
    )
    return Prebuilt(sa.select(done).add_cte(recorded))


def complete_recorded(
    connection: sa.Connection,
    complete: Prebuilt,
    params: dict[str, Any],
    claim: Any,
    duration_seconds: float | None,
) -> sa.Row[Any] | None:
    """PostgreSQL: the completion and its history row in one round trip (``None``: the
    lease was not live, and nothing was written)."""
    statement = _RECORDED.get(id(complete))
    if statement is None:
        statement = _RECORDED[id(complete)] = _recorded(complete)
    params = {
        **params,
        "a_attempt": claim.attempt,
        "a_worker": claim.lease_owner,
        "a_duration": duration_seconds,
    }
    return statement(connection, params).first()
