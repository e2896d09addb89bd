"""Pure campaign rules (no SQL, no I/O): the invariants health checks, and what a
flow-control cap may be.

A row here is anything with the columns as attributes (a SQLAlchemy ``Row`` in
practice); the rules read it and refuse, so they can be tested without a database.
"""

from __future__ import annotations

from typing import Any, Final

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import ReportStatus, blocked
from benchledger.domain.canonical import is_sha256
from benchledger.errors import CampaignBlocked

#: The largest flow-control cap accepted (per campaign).
MAX_CAP: Final = 1_000_000


def cap_value(value: Any) -> int | None:
    """A flow-control cap: ``None`` (no cap) or an integer from 0 (paused) to 1,000,000."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CAP:
        raise CampaignBlocked(
            dom.LIMIT_INVALID, f"a flow-control cap is an integer from 0 (paused) to {MAX_CAP:,}"
        )
    return int(value)


class StateInvalid(Exception):
    """A stored row breaks an invariant (health turns it into ``state_invalid``)."""


def require(condition: object) -> None:
    """Refuse the row (:class:`StateInvalid`) unless ``condition`` holds."""
    if not condition:
        raise StateInvalid


def stored_int(value: Any) -> int:
    require(isinstance(value, int) and not isinstance(value, bool))
    return int(value)


def stored_time(value: Any) -> float:
    try:
        return dom.timestamp(value)
    except CampaignBlocked:
        raise StateInvalid from None


def check_report_state(row: Any, work_max_attempts: tuple[Any, Any]) -> Any:
    """The report-state row, checked: ``report_state_invalid`` when an invariant is broken.

    ``work_max_attempts`` is the (min, max) of the items' ``max_attempts``: the
    report's attempt budget must equal every item's.
    """
    try:
        require(row is not None)
        status = row.status
        require(status in dom.REPORT_STATUSES)
        lease = (row.lease_owner, row.lease_token, row.lease_expires_at)
        if status == ReportStatus.LEASED:
            require(all(value is not None for value in lease))
            require(dom.is_identifier(row.lease_owner) and dom.is_identifier(row.lease_token))
            stored_time(row.lease_expires_at)
        else:
            require(all(value is None for value in lease))
        attempts, maximum = stored_int(row.attempts), stored_int(row.max_attempts)
        require(0 <= attempts <= maximum <= dom.MAX_ATTEMPTS)
        minimum, most = work_max_attempts
        require(minimum == most == maximum)
        code, detail = row.last_error_code, row.last_error_detail_hash
        if status == ReportStatus.PENDING:
            require(attempts == 0 and code is None)
        elif not (status == ReportStatus.RETRY_WAIT and code == dom.REPORT_LEASE_EXPIRED):
            require(attempts >= 1)  # a lost lease gave its attempt back: waiting, maybe none
        if status in (ReportStatus.RETRY_WAIT, ReportStatus.FAILED):
            require(code is not None)
        else:
            require(code is None)
        require(code is None or dom.is_error_code(code))
        require(detail is None or is_sha256(detail))
        require(
            status not in (ReportStatus.PENDING, ReportStatus.LEASED, ReportStatus.SUCCEEDED)
            or detail is None
        )
        stored_time(row.next_attempt_at)
        require(stored_time(row.created_at) <= stored_time(row.updated_at))
    except StateInvalid:
        raise blocked(dom.REPORT_STATE_INVALID) from None
    return row
