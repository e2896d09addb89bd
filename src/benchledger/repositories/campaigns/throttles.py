"""A throttled attempt handed back: the item is due again later, its attempt given back.

:data:`THROTTLE` is one compare-and-set ``UPDATE`` of the claim's live lease (the
conditions of :class:`~.leases.LeaseStatements`): while the item's ``throttles``
are below its ``max_throttles``, the attempt is given back (``attempts - 1``),
one throttle counted and the item waits in ``retry_wait`` until ``:next_at``
with the throttle's code. From the budget on, a throttle is an ordinary
retryable failure (``throttles_spent``): the attempt stays spent, and with none
left the item fails. :func:`throttle` adds the attempt's history row in the
same transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_codes import THROTTLES_SPENT
from benchledger.repositories.campaigns.attempts import record_attempt
from benchledger.repositories.campaigns.leases import (
    RELEASED,
    WORK,
    WORK_OUTCOME_COLUMNS,
    WorkLeases,
    live_lease_params,
)


def _throttle() -> Any:
    c = WORK.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    next_at = sa.bindparam("next_at", type_=c.next_attempt_at.type)
    spent = c.throttles >= c.max_throttles
    fails = sa.and_(spent, c.attempts >= c.max_attempts)
    return (
        sa.update(WORK)
        .where(*WorkLeases.statements.live)
        .values(
            status=sa.case((fails, WorkStatus.FAILED.value), else_=WorkStatus.RETRY_WAIT.value),
            attempts=sa.case((spent, c.attempts), else_=c.attempts - 1),
            throttles=c.throttles + 1,
            next_attempt_at=sa.case((fails, now), else_=next_at),
            last_error_code=sa.case(
                (spent, THROTTLES_SPENT), else_=sa.bindparam("code", type_=sa.Text())
            ),
            last_error_detail_hash=None,
            updated_at=now,
            **RELEASED,
        )
        .returning(*WORK_OUTCOME_COLUMNS, c.throttles)
    )


THROTTLE = Prebuilt(_throttle())


def throttle(
    connection: sa.Connection,
    claim: Any,
    now: float,
    next_at: float,
    code: str,
    duration_seconds: float | None,
) -> sa.Row[Any] | None:
    """Hand the claim's item back, due at ``next_at`` (``None``: the lease was not live)."""
    params = live_lease_params(claim, now)
    params.update(next_at=next_at, code=code)
    row = THROTTLE(connection, params).first()
    if row is not None:
        if row.last_error_code != THROTTLES_SPENT:
            outcome = AttemptOutcome.THROTTLED
        elif row.status == WorkStatus.FAILED:
            outcome = AttemptOutcome.FAILED
        else:
            outcome = AttemptOutcome.RETRY_SCHEDULED
        record_attempt(connection, claim, now, outcome, row.last_error_code, duration_seconds)
    return row
