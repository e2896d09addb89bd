"""A lease's transitions, shared by work items and the report: one table's statements.

Both tables carry the same lease columns and move through the same states
(:class:`LeaseStatements`: renew, fail, complete, each a compare-and-set on the
claim's live lease; :func:`leased_values` and :func:`expired_values`: what a
claim and an expiry write). :class:`LeaseRows` runs them on a Connection;
``WorkLeases`` (:mod:`.leases`) and ``ReportLeases`` (:mod:`.reports`) build on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.domain.campaign import WorkStatus

#: A row without a lease.
RELEASED: Final = {"lease_owner": None, "lease_token": None, "lease_expires_at": None}


# -- a lease's transitions, shared by work items and the report -------------------------------
#
# The parameters of a claim's live lease are named ``c_*`` (see :func:`live_lease_params`),
# the operation's time ``now``.


def leased_values(table: sa.Table) -> dict[str, Any]:
    """A new lease, one more attempt. The leased row carries no error: the previous
    attempt's code and detail are cleared (the attempt history keeps them). A work
    item's row also records when the lease was granted (``leased_at``: the attempt's
    start, which the history reads when the attempt ends)."""
    started = (
        {"leased_at": sa.bindparam("now", type_=table.c.leased_at.type)}
        if "leased_at" in table.c
        else {}
    )
    return {
        **started,
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


def losses_spent(table: sa.Table) -> sa.ColumnElement[bool]:
    """This lease's loss would spend the row's lease-loss budget."""
    return table.c.lease_losses + 1 >= table.c.max_lease_losses


def expired_values(table: sa.Table, code: str, spent_code: str) -> dict[str, Any]:
    """An expired lease released. Its holder stopped renewing it (it died, or hung): that
    is not the item's failure, so the attempt is given back and one lease loss counted,
    and the row is due again now; once its losses reach ``max_lease_losses`` it fails
    for good with ``spent_code`` (the attempt then stays counted), so a case that kills
    its worker every time still ends.

    The error is the expiry (``code``); a stale error detail goes with the lease.
    """
    c = table.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    spent = losses_spent(table)
    return {
        "status": sa.case((spent, WorkStatus.FAILED.value), else_=WorkStatus.RETRY_WAIT.value),
        "attempts": sa.case((spent, c.attempts), else_=c.attempts - 1),
        "lease_losses": c.lease_losses + 1,
        "next_attempt_at": now,
        "last_error_code": sa.case((spent, spent_code), else_=code),
        "last_error_detail_hash": None,
        "updated_at": now,
        **RELEASED,
    }


class LeaseStatements:
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
        #: The conditions that match only the claim's live lease (``c_*``, ``now``).
        self.live = live
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
                **RELEASED,
            )
            .returning(*outcome_columns)
        )
        self.complete = Prebuilt(
            sa.update(table)
            .where(*live)
            .values(updated_at=now, **RELEASED, **completed)
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


class LeaseRows:
    """Renew and fail of a claim's live lease, on the caller's Connection."""

    statements: ClassVar[LeaseStatements]

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
        duration_seconds: float | None = None,
    ) -> sa.Row[Any] | None:
        """Record a failed attempt of the claim's live lease (``retry_wait`` or ``failed``).

        ``duration_seconds`` is for the attempt history, which only work items keep."""
        params = live_lease_params(claim, now)
        params.update(
            new_status=status,
            next_attempt_at_=next_attempt_at,
            code=code,
            detail_hash=detail_hash,
        )
        return self.statements.fail(self.connection, params).first()
