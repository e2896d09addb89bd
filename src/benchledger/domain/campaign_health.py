"""The report against the items, and health's rules over a campaign's aggregates (pure).

:func:`report_state_inconsistent` and :func:`report_row_ok` hold a campaign's
report state and stored report against its items (the integrity audit uses the
first, health both). :func:`audit_current` says whether the last audit still
describes the campaign. :func:`assess_health` classifies a campaign from what
health reads of it (:class:`HealthFacts`): its row, its aggregates and its
report rows, with a clock-skew tolerance. Nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import HealthStatus, ReportStatus, WorkStatus, blocked
from benchledger.domain.campaign_codes import REASON_INTEGRITY_FAILED
from benchledger.domain.campaign_results import check_result_size
from benchledger.domain.canonical import is_sha256, sha256_text
from benchledger.domain.integrity import is_time, report_state_ok
from benchledger.errors import CampaignBlocked

# -- the report against the items --------------------------------------------------------


def report_state_inconsistent(status: Any, has_report: bool, complete: bool) -> bool:
    """A report is stored outside a lease only together with the state's success.

    A stored report beside a state never leased (or an unfinished campaign with
    a report, or a state past pending) is an edit.
    """
    if not complete:
        return status != ReportStatus.PENDING or has_report
    return (status == ReportStatus.SUCCEEDED and not has_report) or (
        status == ReportStatus.PENDING and has_report
    )


def report_row_ok(row: Any, campaign_id: str, policy_sha256: str, limit: float) -> bool:
    """The stored report's own checks: its sha256, its policy, its date (not its results)."""
    try:
        text = row.report_json
        if not (isinstance(text, str) and text):
            return False
        check_result_size(text)
        return bool(
            row.campaign_id == campaign_id
            and row.policy_sha256 == policy_sha256
            and is_sha256(row.results_sha256)
            and row.report_sha256 == sha256_text(text)
            and is_time(row.created_at)
            and row.created_at <= limit
        )
    except CampaignBlocked:
        return False


# -- the last audit, still current? ----------------------------------------------------

#: At most this many item outcomes are counted since an audit: a count this high
#: means "at least" (it bounds what a status or health read costs).
CHANGES_COUNTED: Final = 10_000


def audit_current(verified_at: float, changes: int, *written_at: Any) -> bool:
    """Whether the last integrity audit still describes the campaign.

    ``changes`` is how many item outcomes (completions, failures, lost leases) were
    recorded after ``verified_at``; ``written_at`` are the times the other rows the
    audit covers were last written (the campaign row, the report state; ``None``:
    no such row). Only writes made through benchledger are seen: an edit made with
    SQL behind its back moves none of these, and shows at the next audit only.
    """
    if changes:
        return False
    return all(time is None or (is_time(time) and time <= verified_at) for time in written_at)


# -- health -----------------------------------------------------------------------------


def stored_float(value: Any) -> float:
    """A stored time, or ``state_invalid``."""
    if not is_time(value):
        raise blocked(dom.STATE_INVALID)
    return float(value)


@attrs.frozen
class HealthFacts:
    """What health reads of a campaign: its row, its aggregates and its report rows."""

    campaign_id: str
    created_at: Any
    updated_at: Any
    max_attempts: Any
    work_count: int
    counts: Mapping[str, int]
    error_codes: Sequence[Any]
    pending_due_at: Any
    retry_due_at: Any
    first_lease_expiry: Any
    last_lease_expiry: Any
    state: Any
    report_row: Any
    policy_sha256: str
    policy_current: bool
    verified_ok: bool | None


@attrs.frozen
class HealthFindings:
    status: str
    reasons: tuple[str, ...]
    report_ready: bool


class LastProgress:
    """The latest time a campaign's rows show progress (kept even when a rule refuses)."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.clock_skew = False

    def saw(self, value: Any, limit: float) -> None:
        time = stored_float(value)
        if time > limit:
            self.clock_skew = True
        if self.at is None or time > self.at:
            self.at = time


def assess_health(
    facts: HealthFacts, now: float, stale: float, skew: float, progress: LastProgress
) -> HealthFindings:
    """The health rules over a campaign's aggregates (with clock-skew tolerance).

    Raises ``CampaignBlocked(state_invalid)`` when the rows break an invariant;
    ``progress`` holds what was seen of the rows' times until then.
    """
    limit = now + skew
    created_at = stored_float(facts.created_at)
    updated_at = stored_float(facts.updated_at)
    if created_at > updated_at:
        raise blocked(dom.STATE_INVALID)
    progress.saw(updated_at, limit)
    state = facts.state
    if not report_state_ok(state, facts.max_attempts):
        raise blocked(dom.STATE_INVALID)
    progress.saw(state.updated_at, limit)
    reasons: set[str] = {dom.REASON_CLOCK_SKEW} if progress.clock_skew else set()
    for code in facts.error_codes:
        if not dom.is_error_code(code):
            raise blocked(dom.STATE_INVALID)
        reasons.add(dom.error_reason(code))

    policy_expired = not facts.policy_current
    complete = facts.counts[WorkStatus.SUCCEEDED] == facts.work_count
    failed = facts.counts[WorkStatus.FAILED]
    due = any(
        value is not None and value <= now for value in (facts.pending_due_at, facts.retry_due_at)
    )
    if facts.first_lease_expiry is not None and facts.first_lease_expiry <= now:
        reasons.add(dom.LEASE_EXPIRED)
        due = True
    live_lease = facts.last_lease_expiry is not None and facts.last_lease_expiry > now
    if policy_expired:
        reasons.add(dom.VALIDITY_EXPIRED)
    if failed:
        reasons.add(dom.REASON_FAILED)
    last = progress.at
    if (
        not complete
        and not failed
        and not live_lease
        and due
        and last is not None
        and now - last > stale
    ):
        reasons.add(dom.REASON_STALLED)
    report_status = state.status
    if state.last_error_code is not None:
        reasons.add(dom.report_error_reason(state.last_error_code))
    if report_status == ReportStatus.LEASED and state.lease_expires_at <= now:
        reasons.add(dom.REPORT_LEASE_EXPIRED)
    if report_status == ReportStatus.FAILED:
        reasons.add(dom.REASON_REPORT_FAILED)
    report_row = facts.report_row
    # Unlike the audit, health does not hold a pending state beside a stored report
    # of a complete campaign against it.
    report_inconsistent = (
        report_status != ReportStatus.PENDING or report_row is not None
        if not complete
        else report_status == ReportStatus.SUCCEEDED and report_row is None
    )
    report_ready = False
    if report_inconsistent:
        reasons.add(dom.REPORT_STATE_INVALID)
    elif complete and report_status != ReportStatus.SUCCEEDED:
        reasons.add(dom.REPORT_MISSING)
    elif complete:
        if report_row_ok(report_row, facts.campaign_id, facts.policy_sha256, limit):
            report_ready = not policy_expired
        else:
            reasons.add(dom.REPORT_INVALID)
    if facts.verified_ok is False:
        reasons.add(REASON_INTEGRITY_FAILED)
        report_ready = False
    status = dom.health_status(reasons, failed)
    if facts.verified_ok is False:
        status = HealthStatus.BLOCKED
    return HealthFindings(status, tuple(sorted(reasons)), report_ready)
