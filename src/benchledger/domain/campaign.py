"""Benchmark campaigns: the vocabulary and scalar rules (no SQL, no I/O).

Limits, the status enums (``WorkStatus``, ``ReportStatus``, ``HealthStatus``,
``ListOrder``), identifiers and their checks, the deterministic ids (sha256
digests of canonical JSON, derived exactly as the legacy store derived them,
so campaigns it created keep their ids) and the attrs validators the value
objects share. Every ``benchmark.campaign.*`` code is re-exported from
:mod:`benchledger.domain.campaign_codes` (``dom.LEASE_LOST``).

The value objects live by job: :mod:`~benchledger.domain.campaign_plan` (suite,
policy, plan), :mod:`~benchledger.domain.campaign_results` (claims, results,
outcomes) and :mod:`~benchledger.domain.campaign_views` (status, list, health).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from benchledger.domain.campaign_codes import *  # noqa: F403 - every code, re-exported
from benchledger.domain.campaign_codes import (
    ATTEMPTS_INVALID,
    BLOCKING_REASONS,
    DEPENDENCY_FAILED,
    DEPENDENCY_PREFIX,
    DURATION_INVALID,
    FAILURE_INVALID,
    IDENTITY_INVALID,
    PAGE_INVALID,
    STATE_INVALID,
    THROTTLED,
    THROTTLED_PREFIX,
    THROTTLES_INVALID,
    TIME_INVALID,
)
from benchledger.domain.canonical import is_sha256, sha256_json
from benchledger.errors import ERROR_CODE, CampaignBlocked

# -- limits -----------------------------------------------------------------------

MAX_ATTEMPTS: Final = 20
#: Leases an item (or the report) may lose to a holder that stopped renewing (a crash, a
#: kill) before it fails with ``lease_losses_spent``: a lost lease gives its attempt back.
DEFAULT_MAX_LEASE_LOSSES: Final = 10
#: Throttled hand-backs an item may take before a throttle spends an attempt.
DEFAULT_MAX_THROTTLES: Final = 100
MAX_THROTTLES: Final = 1_000_000
MAX_LEASE_SECONDS: Final = 86_400.0
MAX_STALE_SECONDS: Final = 31_536_000.0
#: 9999-12-31T23:59:59Z: the latest time accepted anywhere (a date past it cannot be shown).
MAX_TIMESTAMP: Final = 253_402_300_799.0
MAX_RESULT_BYTES: Final = 2_000_000
MAX_IDENTIFIER_LENGTH: Final = 256
MAX_CASES: Final = 100_000
MAX_LOCALES: Final = 1_000
MAX_LIST_LIMIT: Final = 1_000
DEFAULT_LIST_LIMIT: Final = 100
MAX_SOURCE_TEXT: Final = 1_000_000
HEALTH_SCHEMA: Final = "blun.website-localization-benchmark-campaign-health.v1"
SUITE_SCHEMA: Final = "benchledger.benchmark-suite.v1"
JOB_SCHEMA: Final = "benchledger.benchmark-job.v1"
CAMPAIGN_PREFIX: Final = "benchmark-campaign-"
WORK_PREFIX: Final = "benchmark-work-"


class WorkStatus(enum.StrEnum):
    """Where a work item, or a campaign's one report, is in its lease lifecycle.

    ``pending`` and ``retry_wait`` (once its ``next_attempt_at`` has come) are
    claimable; ``leased`` is held by one worker until its lease expires;
    ``succeeded`` and ``failed`` are final.
    """

    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ReportStatus(enum.StrEnum):
    """Where a campaign's one report finalization is (the report-state row's ``status``).

    The same five states as a work item, with the same meaning: ``pending`` and
    ``retry_wait`` (once due) may be claimed by a finalizer, ``leased`` is held
    by one, ``succeeded`` means the report is stored and final, ``failed`` that
    finalization failed for good (``campaign retry`` re-arms it).
    """

    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class HealthStatus(enum.StrEnum):
    """A campaign's health: ``blocked`` needs an operator, ``degraded`` has reasons to look."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    BLOCKED = "blocked"


class ListOrder(enum.StrEnum):
    """The order of a campaign listing (by creation time, then id)."""

    OLDEST = "oldest"
    NEWEST = "newest"


#: The values a work item's ``status`` column may hold (its CHECK constraint).
STATUSES: Final = tuple(status.value for status in WorkStatus)
#: The values the report-state row's ``status`` column may hold (its CHECK constraint).
REPORT_STATUSES: Final = tuple(status.value for status in ReportStatus)
#: The work statuses a claim may lease (the claimable index's predicate).
CLAIMABLE: Final = (WorkStatus.PENDING.value, WorkStatus.RETRY_WAIT.value)
#: The work statuses of an item not yet succeeded (a campaign with none is complete).
UNFINISHED: Final = tuple(
    status.value for status in WorkStatus if status is not WorkStatus.SUCCEEDED
)
#: The report statuses a finalizer may lease.
REPORT_CLAIMABLE: Final = (ReportStatus.PENDING.value, ReportStatus.RETRY_WAIT.value)
HEALTH_REASON: Final = re.compile(r"^[a-z][a-z0-9_.-]{0,255}$")
CAMPAIGN_ID: Final = re.compile(r"^benchmark-campaign-[0-9a-f]{64}$")
WORK_ID: Final = re.compile(r"^benchmark-work-[0-9a-f]{64}$")
LOCALE: Final = re.compile(r"^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$")
CONTENT_TYPE: Final = re.compile(r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$")

# -- error codes: in campaign_codes, re-exported here (``dom.LEASE_LOST``) ----------


def blocked(code: str) -> CampaignBlocked:
    return CampaignBlocked(code)


# -- scalar rules ------------------------------------------------------------------


def timestamp(value: Any) -> float:
    """Epoch seconds: a number (not a bool) from 0 to the end of year 9999, the last
    time a calendar date (and every page and table that shows one) can name."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise blocked(TIME_INVALID)
    try:
        result = float(value)
    except OverflowError:
        raise blocked(TIME_INVALID) from None
    if not 0 <= result <= MAX_TIMESTAMP:  # NaN fails too
        raise blocked(TIME_INVALID)
    return result


def duration(value: Any, *, allow_zero: bool = False) -> float:
    """A lease or delay: (0, 1 day], or [0, 1 day] with ``allow_zero``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise blocked(DURATION_INVALID)
    try:
        result = float(value)
    except OverflowError:
        raise blocked(DURATION_INVALID) from None
    if not math.isfinite(result):
        raise blocked(DURATION_INVALID)
    if (result < 0 if allow_zero else result <= 0) or result > MAX_LEASE_SECONDS:
        raise blocked(DURATION_INVALID)
    return result


#: Unicode categories an identifier never holds: control (Cc), format (Cf: bidi
#: overrides, zero-width characters, ...), lone surrogates (Cs) and the line and
#: paragraph separators (Zl, Zp). Confusable look-alikes are accepted (see
#: docs/errors.md, "Identifiers").
_NOT_IN_IDENTIFIERS: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _plain_characters(value: str) -> bool:
    # Fast path: printable text holds no "Other" (C*) and no separator but the space.
    if value.isprintable():
        return True
    return not any(unicodedata.category(char) in _NOT_IN_IDENTIFIERS for char in value)


def is_text(value: Any) -> bool:
    """Text that encodes as UTF-8 (no lone surrogate), is NFC and holds no NUL."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return unicodedata.is_normalized("NFC", value)


def is_identifier(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and len(value) <= MAX_IDENTIFIER_LENGTH
        and value == value.strip()
        and _plain_characters(value)
        and unicodedata.is_normalized("NFC", value)
    )


def identifier(value: Any, code: str = IDENTITY_INVALID) -> str:
    """A worker id, owner, token or code: NFC text, trimmed, 1-256 chars, without
    control, format (bidi, zero-width), surrogate or line/paragraph separator characters."""
    if not is_identifier(value):
        raise blocked(code)
    return str(value)


def is_error_code(value: Any) -> bool:
    return isinstance(value, str) and ERROR_CODE.fullmatch(value) is not None


def max_attempts_value(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise blocked(ATTEMPTS_INVALID)
    return value


def failure_detail(value: Any, code: str = FAILURE_INVALID) -> str | None:
    """Failure detail text (stored only as its sha256): NFC UTF-8 text without NUL."""
    if value is None:
        return None
    if not is_text(value):
        raise blocked(code)
    return str(value)


def retry_delay(
    attempt: int,
    base: float,
    maximum: float,
    *,
    jitter: float = 0.0,
    rng: Callable[[], float] = random.random,
) -> float:
    """``min(maximum, base * 2**(attempt-1))``, then up to ``jitter`` x that added at random.

    ``jitter`` is a fraction in [0, 1]; the result never exceeds the longest
    allowed delay (one day). With ``jitter == 0`` it is deterministic.
    """
    delay = min(float(maximum), float(base) * float(2 ** min(max(attempt, 1) - 1, 30)))
    if jitter:
        delay += delay * jitter * rng()
    return min(delay, MAX_LEASE_SECONDS)


def dependency_code(code: str) -> str:
    """The work-item error code recorded for a dependency failure ``code``."""
    full = DEPENDENCY_PREFIX + code
    return full if len(full) <= 128 else DEPENDENCY_FAILED


def throttled_code(code: str) -> str:
    """The work-item error code recorded for a throttled attempt with evaluator ``code``."""
    full = THROTTLED_PREFIX + code
    return full if len(full) <= 128 else THROTTLED


def is_throttle_code(code: object) -> bool:
    """Whether an item's error code says its last attempt was throttled."""
    return isinstance(code, str) and (code == THROTTLED or code.startswith(THROTTLED_PREFIX))


def max_throttles_value(value: Any) -> int:
    """``max_throttles`` of a campaign's items: an int in [1, MAX_THROTTLES]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THROTTLES:
        raise blocked(THROTTLES_INVALID)
    return value


def campaign_id_for(policy_sha256: str) -> str:
    return CAMPAIGN_PREFIX + policy_sha256


def is_campaign_id(value: Any) -> bool:
    return isinstance(value, str) and CAMPAIGN_ID.fullmatch(value) is not None


def work_id_for(
    campaign_id: str, policy_sha256: str, suite_sha256: str, target_locale: str, case_key: str
) -> str:
    """A work id: ``benchmark-work-`` + sha256 of the item's binding."""
    return WORK_PREFIX + sha256_json(
        {
            "campaign_id": campaign_id,
            "policy_sha256": policy_sha256,
            "suite_sha256": suite_sha256,
            "target_locale": target_locale,
            "suite_case_key": case_key,
        }
    )


def work_ids_for(
    campaign_id: str, policy_sha256: str, suite_sha256: str
) -> Callable[[str, str], str]:
    """``work_id_for`` of one campaign as a function of (target locale, case key).

    The campaign's part of the canonical JSON is encoded once; each call only
    encodes the two strings and hashes (the same text as ``work_id_for``: keys
    in sorted order, no whitespace, non-ASCII as is), so deriving a whole
    campaign's ids costs a few microseconds per item. For validated plans only
    (their strings are already known to be canonical-JSON text).
    """
    dumps = json.JSONEncoder(ensure_ascii=False).encode
    head = (
        f'{{"campaign_id":{dumps(campaign_id)},"policy_sha256":{dumps(policy_sha256)},'
        '"suite_case_key":'
    )
    middle = f',"suite_sha256":{dumps(suite_sha256)},"target_locale":'

    def work_id(target_locale: str, case_key: str) -> str:
        text = head + dumps(case_key) + middle + dumps(target_locale) + "}"
        return WORK_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()

    return work_id


def results_sha256(result_sha256s: Sequence[str]) -> str:
    """The digest binding a report to its results: sha256 of the ordered list of digests."""
    if not all(is_sha256(value) for value in result_sha256s):
        raise blocked(STATE_INVALID)
    return sha256_json(list(result_sha256s))


# -- validators the value objects share ----------------------------------------------

Validator = Callable[[Any, Any, Any], None]


def blocks_with(code: str) -> Callable[[Callable[[Any], object]], Validator]:
    """A factory of attrs validators raising ``CampaignBlocked(code)`` on a falsy predicate."""

    def make(predicate: Callable[[Any], object]) -> Validator:
        def check(_instance: Any, _attribute: Any, value: Any) -> None:
            if not predicate(value):
                raise blocked(code)

        return check

    return make


def is_float(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value >= 0


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_optional_code(value: Any) -> bool:
    return value is None or is_error_code(value)


def is_optional_sha(value: Any) -> bool:
    return value is None or is_sha256(value)


def is_locale(value: Any) -> bool:
    return isinstance(value, str) and LOCALE.fullmatch(value) is not None


def is_attempts(value: Any) -> bool:
    return is_int(value) and 1 <= value <= MAX_ATTEMPTS


def is_status(value: Any) -> bool:
    return value in STATUSES


def is_report_status(value: Any) -> bool:
    return value in REPORT_STATUSES


def is_work_id(value: Any) -> bool:
    return isinstance(value, str) and WORK_ID.fullmatch(value) is not None


# -- rules of the reads ------------------------------------------------------------


def list_limit(value: Any) -> int:
    """A listing's page size: an integer from 1 to 1,000 (``page_invalid``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIST_LIMIT:
        raise blocked(PAGE_INVALID)
    return value


def health_status(reasons: Iterable[str], failed: int) -> str:
    """The classification: blocked, degraded (any reason) or healthy."""
    reasons = set(reasons)
    if failed > 0 or reasons & BLOCKING_REASONS or STATE_INVALID in reasons:
        return HealthStatus.BLOCKED
    return HealthStatus.DEGRADED if reasons else HealthStatus.HEALTHY


def empty_counts() -> dict[str, int]:
    return dict.fromkeys(STATUSES, 0)
