"""Benchmark campaigns: value objects and pure rules (no SQL, no I/O).

A campaign binds one immutable :class:`CampaignPolicy` to one :class:`Suite`;
its work is one item per (required locale x suite case). Everything here is
deterministic: identities are sha256 digests of canonical JSON, derived exactly
as the legacy store derived them, so campaigns it created keep their ids.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import attrs

from benchledger.domain.campaign_codes import *  # noqa: F403 - every code, re-exported
from benchledger.domain.campaign_codes import (
    ATTEMPTS_INVALID,
    BLOCKING_REASONS,
    CLAIM_INVALID,
    DEPENDENCY_FAILED,
    DEPENDENCY_PREFIX,
    DURATION_INVALID,
    FAILURE_INVALID,
    IDENTITY_INVALID,
    INPUT_INVALID,
    PAGE_INVALID,
    POLICY_INVALID,
    REPORT_CLAIM_INVALID,
    RESULT_INVALID,
    STATE_INVALID,
    SUITE_INVALID,
    SUITE_MISMATCH,
    TIME_INVALID,
    VALIDITY_EXPIRED,
)
from benchledger.domain.canonical import (
    CanonicalJsonError,
    CanonicalJsonTooLarge,
    canonical_json,
    canonical_value,
    is_sha256,
    sha256_json,
    sha256_text,
)
from benchledger.errors import ERROR_CODE, CampaignBlocked

if TYPE_CHECKING:
    from benchledger.domain.integrity import IntegrityReport

# -- limits -----------------------------------------------------------------------

MAX_ATTEMPTS: Final = 20
MAX_LEASE_SECONDS: Final = 86_400.0
MAX_STALE_SECONDS: Final = 31_536_000.0
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
    """Epoch seconds: a finite, non-negative number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise blocked(TIME_INVALID)
    try:
        result = float(value)
    except OverflowError:
        raise blocked(TIME_INVALID) from None
    if result < 0 or not math.isfinite(result):
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


Validator = Callable[[Any, Any, Any], None]


def _fail(code: str) -> Callable[[Callable[[Any], object]], Validator]:
    """A factory of attrs validators raising ``CampaignBlocked(code)`` on a falsy predicate."""

    def make(predicate: Callable[[Any], object]) -> Validator:
        def check(_instance: Any, _attribute: Any, value: Any) -> None:
            if not predicate(value):
                raise blocked(code)

        return check

    return make


def _is_float(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value >= 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_optional_code(value: Any) -> bool:
    return value is None or is_error_code(value)


def _is_optional_sha(value: Any) -> bool:
    return value is None or is_sha256(value)


# -- suite ------------------------------------------------------------------------

_suite_check = _fail(SUITE_INVALID)
_CASE_FIELDS = (
    "key",
    "source_id",
    "source_revision",
    "source_text",
    "source_locale",
    "content_type",
)


def _is_source_text(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value.strip())
        and len(value) <= MAX_SOURCE_TEXT
        and is_text(value)
    )


def _is_locale(value: Any) -> bool:
    return isinstance(value, str) and LOCALE.fullmatch(value) is not None


@attrs.frozen
class SuiteCase:
    """One benchmark case: a source text to localize, identified by ``key``."""

    key: str = attrs.field(validator=_suite_check(is_identifier))
    source_id: str = attrs.field(validator=_suite_check(is_identifier))
    source_revision: str = attrs.field(validator=_suite_check(is_identifier))
    source_text: str = attrs.field(validator=_suite_check(_is_source_text), repr=False)
    source_locale: str = attrs.field(validator=_suite_check(_is_locale))
    content_type: str = attrs.field(
        default="text/plain",
        validator=_suite_check(lambda v: isinstance(v, str) and CONTENT_TYPE.fullmatch(v)),
    )

    def as_payload(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _CASE_FIELDS}

    @classmethod
    def from_payload(cls, payload: Any) -> SuiteCase:
        if not isinstance(payload, Mapping) or set(payload) != set(_CASE_FIELDS):
            raise blocked(SUITE_INVALID)
        return cls(**{name: payload[name] for name in _CASE_FIELDS})


def _cases(value: Iterable[SuiteCase]) -> tuple[SuiteCase, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise blocked(SUITE_INVALID)
    try:
        return tuple(value)
    except TypeError:
        raise blocked(SUITE_INVALID) from None


def _valid_cases(_instance: Any, _attribute: Any, cases: tuple[SuiteCase, ...]) -> None:
    if not 1 <= len(cases) <= MAX_CASES or not all(isinstance(c, SuiteCase) for c in cases):
        raise blocked(SUITE_INVALID)
    if len({case.key for case in cases}) != len(cases):
        raise blocked(SUITE_INVALID)


@attrs.frozen
class Suite:
    """An ordered set of cases; identified by the sha256 of its canonical manifest."""

    cases: tuple[SuiteCase, ...] = attrs.field(converter=_cases, validator=_valid_cases)
    _by_key: dict[str, SuiteCase] = attrs.field(init=False, repr=False, eq=False, hash=False)
    _sha256: str = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {case.key: case for case in self.cases})
        object.__setattr__(self, "_sha256", _manifest_sha256(self.cases))

    def manifest(self) -> dict[str, Any]:
        return {"schema": SUITE_SCHEMA, "cases": [case.as_payload() for case in self.cases]}

    @property
    def sha256(self) -> str:
        return self._sha256

    def case(self, key: str) -> SuiteCase | None:
        return self._by_key.get(key)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(case.key for case in self.cases)

    @classmethod
    def from_manifest(cls, manifest: Any) -> Suite:
        return cls(_manifest_cases(manifest))

    @classmethod
    def from_canonical_text(cls, text: Any) -> Suite:
        """The suite whose canonical manifest is exactly ``text`` (a stored suite).

        The text is parsed once and the parsed manifest let go before the suite's
        sha256 is computed: a large suite never has two parsed copies at once. The
        suite's sha256 (of its canonical manifest) equal to the text's proves the
        text canonical; anything else raises ``suite_invalid``.
        """
        if not isinstance(text, str):
            raise blocked(SUITE_INVALID)
        try:
            manifest = json.loads(text)
        except (ValueError, RecursionError):
            raise blocked(SUITE_INVALID) from None
        cases = _manifest_cases(manifest)
        del manifest
        suite = cls(cases)
        if suite.sha256 != sha256_text(text):
            raise blocked(SUITE_INVALID)
        return suite


def _manifest_cases(manifest: Any) -> tuple[SuiteCase, ...]:
    if (
        not isinstance(manifest, Mapping)
        or set(manifest) != {"schema", "cases"}
        or manifest["schema"] != SUITE_SCHEMA
        or not isinstance(manifest["cases"], list | tuple)
    ):
        raise blocked(SUITE_INVALID)
    return tuple(SuiteCase.from_payload(item) for item in manifest["cases"])


#: Cases encoded at a time when a suite's sha256 is computed.
_HASH_BATCH: Final = 512


def _manifest_sha256(cases: tuple[SuiteCase, ...]) -> str:
    """``sha256_json(Suite(cases).manifest())``, a batch of cases at a time.

    The canonical manifest is ``{"cases":[case,case,...],"schema":"..."}`` (keys
    sorted, no white space), so its text is each batch's canonical list without
    its brackets, joined by commas: a large suite is hashed without building
    its whole manifest and text (tests/campaign/test_domain.py compares the two).
    """
    digest = hashlib.sha256(b'{"cases":[')
    for start in range(0, len(cases), _HASH_BATCH):
        if start:
            digest.update(b",")
        batch = canonical_json([case.as_payload() for case in cases[start : start + _HASH_BATCH]])
        digest.update(batch[1:-1].encode("utf-8"))
    digest.update(f'],"schema":{canonical_json(SUITE_SCHEMA)}}}'.encode())
    return digest.hexdigest()


# -- policy -----------------------------------------------------------------------

_policy_check = _fail(POLICY_INVALID)
_POLICY_FIELDS = (
    "suite_sha256",
    "required_locales",
    "valid_until",
    "candidate_provider_id",
    "candidate_model_id",
    "candidate_model_version",
    "candidate_software_version",
    "candidate_glossary_version",
    "candidate_policy_version",
)


def _locales(value: Any) -> tuple[str, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise blocked(POLICY_INVALID)
    try:
        return tuple(value)
    except TypeError:
        raise blocked(POLICY_INVALID) from None


def _valid_locales(_instance: Any, _attribute: Any, value: tuple[str, ...]) -> None:
    if (
        not 1 <= len(value) <= MAX_LOCALES
        or not all(_is_locale(locale) for locale in value)
        or len(set(value)) != len(value)
    ):
        raise blocked(POLICY_INVALID)


def _valid_until(value: Any) -> float:
    try:
        return timestamp(value)
    except CampaignBlocked:
        raise blocked(POLICY_INVALID) from None


@attrs.frozen
class CampaignPolicy:
    """What a campaign measures: a suite (by hash), locales, validity, the candidate.

    Its canonical payload is the policy binding, so its sha256 (and the
    campaign id derived from it) matches campaigns the legacy store created.
    """

    suite_sha256: str = attrs.field(validator=_policy_check(is_sha256))
    required_locales: tuple[str, ...] = attrs.field(converter=_locales, validator=_valid_locales)
    valid_until: float = attrs.field(converter=_valid_until)
    candidate_provider_id: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_model_id: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_model_version: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_software_version: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_glossary_version: str = attrs.field(validator=_policy_check(is_identifier))
    candidate_policy_version: str = attrs.field(validator=_policy_check(is_identifier))
    _sha256: str = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_sha256", sha256_json(self.as_payload()))

    def as_payload(self) -> dict[str, Any]:
        payload = {name: getattr(self, name) for name in _POLICY_FIELDS}
        payload["required_locales"] = list(self.required_locales)
        return payload

    @property
    def sha256(self) -> str:
        return self._sha256

    @property
    def campaign_id(self) -> str:
        return campaign_id_for(self._sha256)

    def candidate(self) -> dict[str, str]:
        return {
            "provider_id": self.candidate_provider_id,
            "model_id": self.candidate_model_id,
            "model_version": self.candidate_model_version,
            "software_version": self.candidate_software_version,
            "glossary_version": self.candidate_glossary_version,
            "policy_version": self.candidate_policy_version,
        }

    def is_current(self, now: float) -> bool:
        return now <= self.valid_until

    def require_current(self, now: float) -> None:
        if not self.is_current(now):
            raise blocked(VALIDITY_EXPIRED)

    @classmethod
    def from_payload(cls, payload: Any) -> CampaignPolicy:
        if not isinstance(payload, Mapping) or set(payload) != set(_POLICY_FIELDS):
            raise blocked(POLICY_INVALID)
        if not isinstance(payload["required_locales"], list | tuple):
            raise blocked(POLICY_INVALID)
        return cls(**{name: payload[name] for name in _POLICY_FIELDS})


# -- a campaign's plan: policy x suite -------------------------------------------------


@attrs.frozen
class PlannedWork:
    work_id: str
    target_locale: str
    suite_case_key: str


@attrs.frozen
class CampaignPlan:
    """A verified policy/suite pair and everything derived from it (pure)."""

    policy: CampaignPolicy
    suite: Suite

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.policy, CampaignPolicy):
            raise blocked(POLICY_INVALID)
        if not isinstance(self.suite, Suite):
            raise blocked(SUITE_INVALID)
        if self.suite.sha256 != self.policy.suite_sha256:
            raise blocked(SUITE_MISMATCH)

    @property
    def campaign_id(self) -> str:
        return self.policy.campaign_id

    @property
    def work_count(self) -> int:
        return len(self.policy.required_locales) * len(self.suite.cases)

    def work(self) -> Iterator[PlannedWork]:
        """Every expected item, in plan order (locale, then manifest order)."""
        work_id = work_ids_for(self.campaign_id, self.policy.sha256, self.suite.sha256)
        for locale in self.policy.required_locales:
            for case in self.suite.cases:
                yield PlannedWork(
                    work_id(locale, case.key),
                    locale,
                    case.key,
                )

    def job_payload(self, target_locale: str, case_key: str) -> dict[str, Any]:
        """The job a worker runs for one item, rebuilt from the stored policy and suite.

        Raises ``state_invalid`` when the item is not part of this plan.
        """
        case = self.suite.case(case_key)
        if case is None or target_locale not in self.policy.required_locales:
            raise blocked(STATE_INVALID)
        campaign_id = self.campaign_id
        return {
            "schema": JOB_SCHEMA,
            "campaign_id": campaign_id,
            "work_id": work_id_for(
                campaign_id, self.policy.sha256, self.suite.sha256, target_locale, case_key
            ),
            "policy_sha256": self.policy.sha256,
            "suite_sha256": self.suite.sha256,
            "suite_case_key": case.key,
            "target_locale": target_locale,
            "source": {
                "id": case.source_id,
                "revision": case.source_revision,
                "text": case.source_text,
                "locale": case.source_locale,
                "content_type": case.content_type,
            },
            "candidate": self.policy.candidate(),
        }


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
        value = canonical_value(dict(result))
        text = canonical_json(value)
    except CanonicalJsonTooLarge:
        raise blocked(RESULT_INVALID) from None
    except CanonicalJsonError:
        raise blocked(INPUT_INVALID) from None
    return value, text


def check_result_size(text: str) -> None:
    """A stored result (or report) is at most 2,000,000 bytes of UTF-8."""
    if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
        raise blocked(RESULT_INVALID)


# -- claims and outcomes ----------------------------------------------------------------

_claim_check = _fail(CLAIM_INVALID)
_report_claim_check = _fail(REPORT_CLAIM_INVALID)
_state_check = _fail(STATE_INVALID)


def _is_attempts(value: Any) -> bool:
    return _is_int(value) and 1 <= value <= MAX_ATTEMPTS


def _is_status(value: Any) -> bool:
    return value in STATUSES


def _is_report_status(value: Any) -> bool:
    return value in REPORT_STATUSES


def _is_work_id(value: Any) -> bool:
    return isinstance(value, str) and WORK_ID.fullmatch(value) is not None


@attrs.frozen
class ClaimedCase:
    """A live lease on one work item; only its holder may renew, complete or fail it."""

    work_id: str = attrs.field(validator=_claim_check(_is_work_id))
    campaign_id: str = attrs.field(validator=_claim_check(is_campaign_id))
    target_locale: str = attrs.field(validator=_claim_check(_is_locale))
    suite_case_key: str = attrs.field(validator=_claim_check(is_identifier))
    job_payload: dict[str, Any] = attrs.field(
        validator=_claim_check(lambda v: isinstance(v, dict)), repr=False, eq=False, hash=False
    )
    attempt: int = attrs.field(validator=_claim_check(_is_attempts))
    max_attempts: int = attrs.field(validator=_claim_check(_is_attempts))
    lease_owner: str = attrs.field(validator=_claim_check(is_identifier))
    lease_token: str = attrs.field(validator=_claim_check(is_identifier), repr=False)
    lease_expires_at: float = attrs.field(validator=_claim_check(_is_float))

    def __attrs_post_init__(self) -> None:
        if self.attempt > self.max_attempts:
            raise blocked(CLAIM_INVALID)


@attrs.frozen
class CaseOutcome:
    """A work item's state right after complete or fail."""

    work_id: str = attrs.field(validator=_state_check(_is_work_id))
    target_locale: str = attrs.field(validator=_state_check(_is_locale))
    suite_case_key: str = attrs.field(validator=_state_check(is_identifier))
    status: str = attrs.field(validator=_state_check(_is_status))
    attempt: int = attrs.field(validator=_state_check(_is_int))
    max_attempts: int = attrs.field(validator=_state_check(_is_attempts))
    next_attempt_at: float = attrs.field(validator=_state_check(_is_float))
    error_code: str | None = attrs.field(validator=_state_check(_is_optional_code))
    error_detail_hash: str | None = attrs.field(validator=_state_check(_is_optional_sha))
    result_sha256: str | None = attrs.field(validator=_state_check(_is_optional_sha))


@attrs.frozen
class ClaimedReport:
    """A live lease on a campaign's report finalization."""

    campaign_id: str = attrs.field(validator=_report_claim_check(is_campaign_id))
    attempt: int = attrs.field(validator=_report_claim_check(_is_attempts))
    max_attempts: int = attrs.field(validator=_report_claim_check(_is_attempts))
    lease_owner: str = attrs.field(validator=_report_claim_check(is_identifier))
    lease_token: str = attrs.field(validator=_report_claim_check(is_identifier), repr=False)
    lease_expires_at: float = attrs.field(validator=_report_claim_check(_is_float))

    def __attrs_post_init__(self) -> None:
        if self.attempt > self.max_attempts:
            raise blocked(REPORT_CLAIM_INVALID)


@attrs.frozen
class ReportOutcome:
    """The report-finalization state right after complete_report or fail_report."""

    campaign_id: str = attrs.field(validator=_state_check(is_campaign_id))
    status: str = attrs.field(validator=_state_check(_is_report_status))
    attempt: int = attrs.field(validator=_state_check(_is_int))
    max_attempts: int = attrs.field(validator=_state_check(_is_attempts))
    next_attempt_at: float = attrs.field(validator=_state_check(_is_float))
    error_code: str | None = attrs.field(validator=_state_check(_is_optional_code))
    error_detail_hash: str | None = attrs.field(validator=_state_check(_is_optional_sha))


def _is_count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _is_counts(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and set(value) == set(STATUSES)
        and all(_is_count(count) for count in value.values())
    )


def _is_error_counts(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        is_error_code(code) and _is_count(count) for code, count in value.items()
    )


_REPORT_FINALIZATION_KEYS = frozenset(
    {"status", "attempt", "max_attempts", "next_attempt_at", "error_code"}
)


def _is_report_finalization(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and set(value) == _REPORT_FINALIZATION_KEYS
        and _is_report_status(value["status"])
        and _is_count(value["attempt"])
        and _is_attempts(value["max_attempts"])
        and _is_float(value["next_attempt_at"])
        and _is_optional_code(value["error_code"])
    )


def _read_only(value: Any) -> Mapping[str, Any]:
    """A read-only copy, so a frozen value object cannot be changed through its mappings."""
    if not isinstance(value, Mapping):
        raise blocked(STATE_INVALID)
    return MappingProxyType(dict(value))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_optional_time(value: Any) -> bool:
    return value is None or _is_float(value)


@attrs.frozen
class CampaignStatus:
    """Operational counters of one campaign (what ``status()`` returns).

    ``counts``, ``error_counts`` and ``report_finalization`` are read-only mappings.

    ``next_due_at`` is the earliest time a claim may find
    something to do without anyone else acting: the earliest
    ``next_attempt_at`` of a pending or retry_wait item, or the earliest
    expiry of a leased item's lease (held here or on another machine), or,
    once every item has succeeded, the report's ``next_attempt_at`` (pending,
    retry_wait) or its lease expiry (leased). It may be in the past: then
    something is due now. It is ``None`` when nothing will ever be due again:
    the report is finalized or failed for good, or every item is final and
    some failed (the campaign is blocked for good). Holders of leases can make
    work due sooner (a failed attempt's retry, the last success making the
    report due), so a waiting worker still looks again now and then.
    """

    campaign_id: str = attrs.field(validator=_state_check(is_campaign_id))
    policy_sha256: str = attrs.field(validator=_state_check(is_sha256))
    suite_sha256: str = attrs.field(validator=_state_check(is_sha256))
    valid_until: float = attrs.field(validator=_state_check(_is_float))
    work_count: int = attrs.field(validator=_state_check(lambda v: _is_int(v) and v > 0))
    counts: Mapping[str, int] = attrs.field(
        converter=_read_only, validator=_state_check(_is_counts), hash=False
    )
    error_counts: Mapping[str, int] = attrs.field(
        converter=_read_only, validator=_state_check(_is_error_counts), hash=False
    )
    complete: bool = attrs.field(validator=_state_check(_is_bool))
    blocked: bool = attrs.field(validator=_state_check(_is_bool))
    report_finalization: Mapping[str, Any] = attrs.field(
        converter=_read_only, validator=_state_check(_is_report_finalization), hash=False
    )
    created_at: float = attrs.field(validator=_state_check(_is_float))
    updated_at: float = attrs.field(validator=_state_check(_is_float))
    next_due_at: float | None = attrs.field(validator=_state_check(_is_optional_time))
    # The last integrity audit (verify()): when, and whether it found nothing (None: never).
    verified_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))
    verified_ok: bool | None = attrs.field(
        default=None, validator=_state_check(lambda v: v is None or _is_bool(v))
    )
    # An operator cancelled it (CampaignService.cancel): claims hand out none of its work.
    cancelled: bool = attrs.field(default=False, validator=_state_check(_is_bool))

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "policy_sha256": self.policy_sha256,
            "suite_sha256": self.suite_sha256,
            "valid_until": self.valid_until,
            "work_count": self.work_count,
            "counts": dict(self.counts),
            "error_counts": dict(self.error_counts),
            "complete": self.complete,
            "blocked": self.blocked,
            "report_finalization": dict(self.report_finalization),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "next_due_at": self.next_due_at,
            # the last integrity audit, once there was one
            **(
                {}
                if self.verified_at is None
                else {"verified_at": self.verified_at, "verified_ok": self.verified_ok}
            ),
            # an operator's cancel, while it lasts
            **({"cancelled": True} if self.cancelled else {}),
        }


def list_limit(value: Any) -> int:
    """A listing's page size: an integer from 1 to 1,000 (``page_invalid``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIST_LIMIT:
        raise blocked(PAGE_INVALID)
    return value


@attrs.frozen
class CampaignSummary:
    """One campaign as listed: its identity and binding, without reading its work."""

    campaign_id: str = attrs.field(validator=_state_check(is_campaign_id))
    policy_sha256: str = attrs.field(validator=_state_check(is_sha256))
    suite_sha256: str = attrs.field(validator=_state_check(is_sha256))
    work_count: int = attrs.field(validator=_state_check(lambda v: _is_int(v) and v > 0))
    created_at: float = attrs.field(validator=_state_check(_is_float))
    updated_at: float = attrs.field(validator=_state_check(_is_float))

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "policy_sha256": self.policy_sha256,
            "suite_sha256": self.suite_sha256,
            "work_count": self.work_count,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@attrs.frozen
class CampaignList:
    """One page of campaigns, oldest first; ``next_cursor`` continues (``None``: the last)."""

    campaigns: tuple[CampaignSummary, ...]
    limit: int
    next_cursor: str | None

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaigns": [summary.as_payload() for summary in self.campaigns],
            "limit": self.limit,
            "next_cursor": self.next_cursor,
        }


def _is_health_status(value: Any) -> bool:
    return value in tuple(HealthStatus)


def _is_reasons(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and all(isinstance(r, str) and HEALTH_REASON.fullmatch(r) for r in value)
        and list(value) == sorted(set(value))
    )


def _is_health_counts(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and all(
            isinstance(pair, tuple)
            and len(pair) == 2
            and _is_status(pair[0])
            and _is_count(pair[1])
            for pair in value
        )
        and [pair[0] for pair in value] == sorted({pair[0] for pair in value})
    )


@attrs.frozen
class CampaignHealth:
    """A read-only, text-free snapshot: healthy, degraded or blocked, with reasons."""

    campaign_id: str = attrs.field(validator=_state_check(lambda v: isinstance(v, str) and v))
    status: str = attrs.field(validator=_state_check(_is_health_status))
    reasons: tuple[str, ...] = attrs.field(validator=_state_check(_is_reasons))
    counts: tuple[tuple[str, int], ...] = attrs.field(validator=_state_check(_is_health_counts))
    work_count: int = attrs.field(validator=_state_check(_is_count))
    report_ready: bool = attrs.field(validator=_state_check(_is_bool))
    last_progress_at: float | None = attrs.field(validator=_state_check(_is_optional_time))
    # The last integrity audit (verify()): when, and whether it found nothing (None: never);
    # ``integrity`` is the audit itself when health ran one (health(..., verify=True)).
    verified_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))
    verified_ok: bool | None = attrs.field(
        default=None, validator=_state_check(lambda v: v is None or _is_bool(v))
    )
    integrity: IntegrityReport | None = attrs.field(default=None)

    def as_payload(self) -> dict[str, Any]:
        """The v1 health payload; plus the last integrity audit, once there was one."""
        payload: dict[str, Any] = {
            "schema": HEALTH_SCHEMA,
            "campaign_id": self.campaign_id,
            "status": self.status,
            "reasons": list(self.reasons),
            "counts": dict(self.counts),
            "work_count": self.work_count,
            "report_ready": self.report_ready,
            "last_progress_at": self.last_progress_at,
        }
        if self.verified_at is not None:
            payload["verified_at"] = self.verified_at
            payload["verified_ok"] = self.verified_ok
        if self.integrity is not None:
            payload["integrity"] = self.integrity.as_payload()
        return payload


def health_status(reasons: Iterable[str], failed: int) -> str:
    """The classification: blocked, degraded (any reason) or healthy."""
    reasons = set(reasons)
    if failed > 0 or reasons & BLOCKING_REASONS or STATE_INVALID in reasons:
        return HealthStatus.BLOCKED
    return HealthStatus.DEGRADED if reasons else HealthStatus.HEALTHY


def empty_counts() -> dict[str, int]:
    return dict.fromkeys(STATUSES, 0)
