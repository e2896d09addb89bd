"""What lease-holder calls return and record: outcomes, failures, the operation guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus, blocked
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
)
from benchledger.domain.canonical import sha256_text
from benchledger.errors import CampaignBlocked

#: Guard failures that keep their own code: the policy expired, or the caller's lease is gone.
GUARD_PASSES = frozenset({dom.VALIDITY_EXPIRED, dom.LEASE_LOST, dom.REPORT_LEASE_LOST})


def guarded(operation_guard: Callable[[], Any] | None) -> Callable[[], None]:
    """The operation guard: a failure outside ``GUARD_PASSES`` is operation_guard_failed."""
    if operation_guard is not None and not callable(operation_guard):
        raise blocked(dom.DEPENDENCY_INVALID)  # not callable: refused before anything runs

    def guard() -> None:
        if operation_guard is None:
            return
        try:
            operation_guard()
        except CampaignBlocked as error:
            if error.code in GUARD_PASSES:
                raise
            raise blocked(dom.OPERATION_GUARD_FAILED) from None
        except Exception:
            raise blocked(dom.OPERATION_GUARD_FAILED) from None

    return guard


def case_outcome(row: Any) -> CaseOutcome:
    return CaseOutcome(
        work_id=row.work_id,
        target_locale=row.target_locale,
        suite_case_key=row.suite_case_key,
        status=row.status,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        next_attempt_at=float(row.next_attempt_at),
        error_code=row.last_error_code,
        error_detail_hash=row.last_error_detail_hash,
        result_sha256=row.result_sha256,
    )


def report_outcome(row: Any) -> ReportOutcome:
    return ReportOutcome(
        campaign_id=row.campaign_id,
        status=row.status,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        next_attempt_at=float(row.next_attempt_at),
        error_code=row.last_error_code,
        error_detail_hash=row.last_error_detail_hash,
    )


@attrs.frozen
class Failure:
    """A failed attempt as it is recorded: validated, with the retry rule applied."""

    code: str
    status: str  # retry_wait while retryable and attempts remain, else failed
    next_attempt_at: float
    detail_hash: str | None
    now: float


def failure_of(
    claim: ClaimedCase | ClaimedReport,
    code: Any,
    retryable: Any,
    delay_seconds: Any,
    detail: Any,
    now: Callable[[], float],
    invalid: str,
) -> Failure:
    """A failure report validated in a fixed order, then the retry rule.

    The code, then retryability, the delay, the time, and last the detail
    text (kept only as its sha256). A retryable failure with attempts left
    waits ``delay_seconds`` in ``retry_wait``; any other is ``failed`` now.
    """
    code = dom.identifier(code)
    if not dom.is_error_code(code) or not isinstance(retryable, bool):
        raise blocked(invalid)
    delay = dom.duration(delay_seconds, allow_zero=True)
    current = now()
    detail = dom.failure_detail(detail, invalid)
    detail_hash = None if detail is None else sha256_text(detail)
    if retryable and claim.attempt < claim.max_attempts:
        return Failure(code, WorkStatus.RETRY_WAIT, current + delay, detail_hash, current)
    return Failure(code, WorkStatus.FAILED, current, detail_hash, current)


@attrs.frozen
class Results:
    """A campaign's verified results in (locale, case key) order."""

    values: tuple[dict[str, Any], ...]
    digests: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return dom.results_sha256(self.digests)
