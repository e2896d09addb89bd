"""What a lease holder holds and hands back: claims, results and outcomes.

:class:`ClaimedCase` and :class:`ClaimedReport` are live leases; a submitted
result is checked and encoded here (``encode_result``, ``result_identity``,
``check_result_size``); :class:`CaseOutcome` and :class:`ReportOutcome` are the
state right after complete or fail. Pure: no SQL, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from benchledger.domain.campaign import (
    MAX_RESULT_BYTES,
    blocked,
    blocks_with,
    is_attempts,
    is_campaign_id,
    is_float,
    is_identifier,
    is_int,
    is_locale,
    is_optional_code,
    is_optional_sha,
    is_report_status,
    is_status,
    is_work_id,
)
from benchledger.domain.campaign_codes import (
    CLAIM_INVALID,
    COST_INVALID,
    INPUT_INVALID,
    REPORT_CLAIM_INVALID,
    RESULT_INVALID,
    STATE_INVALID,
)
from benchledger.domain.canonical import (
    CanonicalJsonError,
    CanonicalJsonTooLarge,
    canonical_json,
)

# -- results ------------------------------------------------------------------------


def result_identity(result: Mapping[str, Any]) -> tuple[str, str]:
    """(target locale, suite case key) a result claims to be for."""
    locale = result.get("target_locale")
    suite = result.get("suite")
    case_key = suite.get("case_key") if isinstance(suite, Mapping) else None
    if not isinstance(locale, str) or not isinstance(case_key, str):
        raise blocked(RESULT_INVALID)
    return locale, case_key


def encode_result(result: Any) -> tuple[dict[str, Any], str]:
    """Canonical data and text of a submitted result.

    ``result_invalid`` when it is not a mapping or is too large (an integer of
    over 4,300 digits, like a text over 2,000,000 bytes); ``input_invalid``
    when it is not JSON data (NaN, a set, a non-string key, a lone surrogate).
    """
    if not isinstance(result, Mapping):
        raise blocked(RESULT_INVALID)
    try:
        text = canonical_json(dict(result))
    except CanonicalJsonTooLarge:
        raise blocked(RESULT_INVALID) from None
    except CanonicalJsonError:
        raise blocked(INPUT_INVALID) from None
    # Canonical text reads back as plain JSON data that encodes to the same text.
    return json.loads(text), text


def check_result_size(text: str) -> None:
    """A stored result (or report) is at most 2,000,000 bytes of UTF-8."""
    if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
        raise blocked(RESULT_INVALID)


# -- claims and outcomes ----------------------------------------------------------------

_claim_check = blocks_with(CLAIM_INVALID)
_report_claim_check = blocks_with(REPORT_CLAIM_INVALID)
_state_check = blocks_with(STATE_INVALID)


@attrs.frozen
class ClaimedCase:
    """A live lease on one work item; only its holder may renew, complete or fail it."""

    work_id: str = attrs.field(validator=_claim_check(is_work_id))
    campaign_id: str = attrs.field(validator=_claim_check(is_campaign_id))
    target_locale: str = attrs.field(validator=_claim_check(is_locale))
    suite_case_key: str = attrs.field(validator=_claim_check(is_identifier))
    job_payload: dict[str, Any] = attrs.field(
        validator=_claim_check(lambda v: isinstance(v, dict)), repr=False, eq=False, hash=False
    )
    attempt: int = attrs.field(validator=_claim_check(is_attempts))
    max_attempts: int = attrs.field(validator=_claim_check(is_attempts))
    lease_owner: str = attrs.field(validator=_claim_check(is_identifier))
    lease_token: str = attrs.field(validator=_claim_check(is_identifier), repr=False)
    lease_expires_at: float = attrs.field(validator=_claim_check(is_float))
    #: Times the item was throttled before this claim (the throttle backoff grows with it).
    throttles: int = attrs.field(
        default=0, validator=_claim_check(lambda v: is_int(v) and 0 <= v < 2**31), eq=False
    )

    def __attrs_post_init__(self) -> None:
        if self.attempt > self.max_attempts:
            raise blocked(CLAIM_INVALID)


#: The most cost units one result may report.
MAX_COST_UNITS = 1_000_000_000


def _cost_check(_instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COST_UNITS:
        raise blocked(COST_INVALID)


@attrs.frozen
class Outcome:
    """What an evaluator may return instead of the bare result mapping.

    ``cost_units`` is what the call cost (tokens, cents: any whole unit the
    campaign's limit group budgets): it counts against the group's
    ``max_cost_per_minute``. ``Outcome(result)`` is the same as returning ``result``.
    """

    result: Mapping[str, Any]
    cost_units: int = attrs.field(default=0, validator=_cost_check)


@attrs.frozen
class Completion:
    """One result of a group commit (``CampaignService.complete_batch``): the live lease
    it completes, the result, and what ``complete`` would take with it."""

    claim: ClaimedCase
    result: Mapping[str, Any]
    duration_seconds: float | None = None
    cost_units: int = 0


def outcome_parts(value: Any) -> tuple[Any, int]:
    """An evaluator's return value as (result, cost units)."""
    if isinstance(value, Outcome):
        return value.result, value.cost_units
    return value, 0


@attrs.frozen
class CaseOutcome:
    """A work item's state right after complete or fail."""

    work_id: str = attrs.field(validator=_state_check(is_work_id))
    target_locale: str = attrs.field(validator=_state_check(is_locale))
    suite_case_key: str = attrs.field(validator=_state_check(is_identifier))
    status: str = attrs.field(validator=_state_check(is_status))
    attempt: int = attrs.field(validator=_state_check(is_int))
    max_attempts: int = attrs.field(validator=_state_check(is_attempts))
    next_attempt_at: float = attrs.field(validator=_state_check(is_float))
    error_code: str | None = attrs.field(validator=_state_check(is_optional_code))
    error_detail_hash: str | None = attrs.field(validator=_state_check(is_optional_sha))
    result_sha256: str | None = attrs.field(validator=_state_check(is_optional_sha))


@attrs.frozen
class ClaimedReport:
    """A live lease on a campaign's report finalization."""

    campaign_id: str = attrs.field(validator=_report_claim_check(is_campaign_id))
    attempt: int = attrs.field(validator=_report_claim_check(is_attempts))
    max_attempts: int = attrs.field(validator=_report_claim_check(is_attempts))
    lease_owner: str = attrs.field(validator=_report_claim_check(is_identifier))
    lease_token: str = attrs.field(validator=_report_claim_check(is_identifier), repr=False)
    lease_expires_at: float = attrs.field(validator=_report_claim_check(is_float))

    def __attrs_post_init__(self) -> None:
        if self.attempt > self.max_attempts:
            raise blocked(REPORT_CLAIM_INVALID)


@attrs.frozen
class ReportOutcome:
    """The report-finalization state right after complete_report or fail_report."""

    campaign_id: str = attrs.field(validator=_state_check(is_campaign_id))
    status: str = attrs.field(validator=_state_check(is_report_status))
    attempt: int = attrs.field(validator=_state_check(is_int))
    max_attempts: int = attrs.field(validator=_state_check(is_attempts))
    next_attempt_at: float = attrs.field(validator=_state_check(is_float))
    error_code: str | None = attrs.field(validator=_state_check(is_optional_code))
    error_detail_hash: str | None = attrs.field(validator=_state_check(is_optional_sha))
