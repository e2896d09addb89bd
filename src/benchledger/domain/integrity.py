"""The integrity audit of a campaign: what it reports, and its pure row checks.

``CampaignService.verify()`` streams every stored row of a campaign through
these checks and returns an :class:`IntegrityReport`: every kind of problem it
found (:class:`Problem`), with the campaign code it stands for, how many rows
showed it and the first few of them. Nothing here touches a database.

Each problem kind maps to one of the campaign codes the other reads raise for
the same state (``state_invalid``, ``report_invalid``, ``report_state_invalid``,
``policy_mismatch``, ``policy_unregistered``, ``report_unverifiable``, ``not_found``,
``archive_invalid``)
or, for a timestamp further in the future than the service's clock-skew
tolerance, the health reason ``clock_skew``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Final

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import ReportStatus, WorkStatus
from benchledger.domain.campaign_codes import (  # re-exported: the audit's health reason
    REASON_INTEGRITY_FAILED as REASON_INTEGRITY_FAILED,
)
from benchledger.domain.canonical import CanonicalJsonError, canonical_json, is_sha256

INTEGRITY_SCHEMA: Final = "benchledger.benchmark-campaign-integrity.v1"
#: At most this many rows are named per kind of problem (the count covers every one).
MAX_EXAMPLES: Final = 5


class Problem(StrEnum):
    """A kind of problem the integrity audit finds (stable names)."""

    # the campaign row and what it binds
    NOT_FOUND = "not_found"  # no such campaign
    POLICY_UNREGISTERED = "policy_unregistered"  # policy or suite not stored (legacy)
    POLICY_MISMATCH = "policy_mismatch"  # the row names another policy than its id
    POLICY_CORRUPT = "policy_corrupt"  # stored policy text: sha256 or content
    SUITE_CORRUPT = "suite_corrupt"  # stored suite text: sha256, content or case count
    WORK_COUNT = "work_count"  # the row's work count is not the plan's
    CAMPAIGN_TIMES = "campaign_times"  # created_at after updated_at, or not a time
    FUTURE_TIME = "future_time"  # a row written later than now (beyond the skew)
    # work items
    ITEM_MISSING = "item_missing"  # an expected (locale, case) has no row
    ITEM_UNEXPECTED = "item_unexpected"  # a row outside the plan, or a wrong work id
    ITEM_STATE = "item_state"  # status, lease, error, attempt or time invariants
    ATTEMPT_BUDGET = "attempt_budget"  # max_attempts differs from the campaign's
    RESULT_HASH = "result_hash"  # result_sha256 is not the sha256 of the result text
    RESULT_INVALID = "result_invalid"  # not canonical JSON, refused by the verifier, other item
    RESULT_SEAL = "result_seal"  # attempts, budget or result digest changed after success
    HISTORY = "history"  # an item's attempt history disagrees with the item (or has no item)
    # the report
    REPORT_STATE = "report_state"  # the finalization state breaks its invariants
    REPORT_INVALID = "report_invalid"  # text, sha256, binding or content of the report
    # a stored report with no stored policy and suite to verify it against (legacy): register
    REPORT_UNVERIFIABLE = "report_unverifiable"
    # an archived campaign's recorded facts (items, results digest, summary, seal)
    ARCHIVE = "archive"


PROBLEM_CODES: Final[Mapping[Problem, str]] = {
    Problem.NOT_FOUND: dom.NOT_FOUND,
    Problem.POLICY_UNREGISTERED: dom.POLICY_UNREGISTERED,
    Problem.POLICY_MISMATCH: dom.POLICY_MISMATCH,
    Problem.FUTURE_TIME: dom.REASON_CLOCK_SKEW,
    Problem.REPORT_STATE: dom.REPORT_STATE_INVALID,
    Problem.REPORT_INVALID: dom.REPORT_INVALID,
    Problem.REPORT_UNVERIFIABLE: dom.REPORT_UNVERIFIABLE,
    Problem.HISTORY: dom.HISTORY_INVALID,
    Problem.ARCHIVE: dom.ARCHIVE_INVALID,
    **{
        kind: dom.STATE_INVALID
        for kind in (
            Problem.POLICY_CORRUPT,
            Problem.SUITE_CORRUPT,
            Problem.WORK_COUNT,
            Problem.CAMPAIGN_TIMES,
            Problem.ITEM_MISSING,
            Problem.ITEM_UNEXPECTED,
            Problem.ITEM_STATE,
            Problem.ATTEMPT_BUDGET,
            Problem.RESULT_HASH,
            Problem.RESULT_INVALID,
            Problem.RESULT_SEAL,
        )
    },
}


def _examples(value: Iterable[str]) -> tuple[str, ...]:
    examples = tuple(value)
    if not all(isinstance(item, str) for item in examples):
        raise TypeError("examples are str")
    if len(examples) > MAX_EXAMPLES:
        raise ValueError(f"at most {MAX_EXAMPLES} examples")
    return examples


@attrs.frozen
class IntegrityProblem:
    """One kind of problem: its code, how many rows showed it, the first few of them.

    ``examples`` name rows: a work id, or ``campaign``, ``policy``, ``suite``,
    ``report`` or ``report_state``.
    """

    kind: Problem = attrs.field(converter=Problem)
    count: int = attrs.field(validator=attrs.validators.ge(1))
    examples: tuple[str, ...] = attrs.field(converter=_examples)

    @property
    def code(self) -> str:
        return PROBLEM_CODES[self.kind]

    def as_payload(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "code": self.code,
            "count": self.count,
            "examples": list(self.examples),
        }


def _problems(value: Iterable[IntegrityProblem]) -> tuple[IntegrityProblem, ...]:
    problems = tuple(value)
    if not all(isinstance(problem, IntegrityProblem) for problem in problems):
        raise TypeError("problems are IntegrityProblem values")
    return problems


@attrs.frozen
class IntegrityReport:
    """What one integrity audit of a campaign found (``ok`` when nothing)."""

    campaign_id: str
    problems: tuple[IntegrityProblem, ...] = attrs.field(converter=_problems)
    rows_checked: int = attrs.field(validator=attrs.validators.ge(0))
    verified_at: float

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def blocking(self) -> bool:
        """Whether a problem shows more than clock skew (a row dated later than now).

        What the campaign row records as the last audit's outcome (``verified_ok``
        is its negation): a worker whose clock runs ahead is a reason to fix the
        clock, not evidence against the stored rows.
        """
        return any(problem.code != dom.REASON_CLOCK_SKEW for problem in self.problems)

    @property
    def reasons(self) -> tuple[str, ...]:
        """The distinct codes of the problems found, sorted."""
        return tuple(sorted({problem.code for problem in self.problems}))

    @property
    def problem_count(self) -> int:
        return sum(problem.count for problem in self.problems)

    def as_payload(self) -> dict[str, Any]:
        return {
            "schema": INTEGRITY_SCHEMA,
            "campaign_id": self.campaign_id,
            "ok": self.ok,
            "reasons": list(self.reasons),
            "problems": [problem.as_payload() for problem in self.problems],
            "rows_checked": self.rows_checked,
            "verified_at": self.verified_at,
        }


class ProblemLog:
    """Collects problems during an audit: a count and a few examples per kind (bounded)."""

    def __init__(self) -> None:
        self._counts: dict[Problem, int] = {}
        self._examples: dict[Problem, list[str]] = {}
        self._subjects: set[str] = set()

    def add(self, kind: Problem, subject: str, count: int = 1) -> None:
        """``count`` more rows show ``kind``; ``subject`` names the first of them."""
        self._subjects.add(subject)
        seen = self._counts.get(kind, 0)
        self._counts[kind] = seen + count
        if len(self._examples.get(kind, ())) < MAX_EXAMPLES:
            self._examples.setdefault(kind, []).append(subject)

    def __contains__(self, kind: object) -> bool:
        return kind in self._counts

    def flagged(self, subject: str) -> bool:
        """Whether some problem was logged about ``subject`` (a later check's consequence
        of it is then not a problem of its own)."""
        return subject in self._subjects

    def __bool__(self) -> bool:
        return bool(self._counts)

    def problems(self) -> tuple[IntegrityProblem, ...]:
        """In the order of :class:`Problem`'s kinds."""
        return tuple(
            IntegrityProblem(kind, self._counts[kind], tuple(self._examples[kind]))
            for kind in Problem
            if kind in self._counts
        )


# -- digests -------------------------------------------------------------------------


#: The text a result seal hashes: work id, attempts, budget and result digest.
SEAL_FORMAT: Final = "benchledger-result-seal-v1:{}:{}:{}:{}"


def result_seal(work_id: str, attempts: int, max_attempts: int, result_sha256: str) -> str:
    """The seal of a succeeded item: sha256 of its work id, attempts, budget and result digest.

    Written with the result; the audit recomputes it, so an attempt count (or a
    budget, or a result digest) edited afterwards no longer matches.
    """
    text = SEAL_FORMAT.format(work_id, attempts, max_attempts, result_sha256)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Text that json.dumps(ensure_ascii=False) writes as itself between quotes.
_PLAIN_JSON_TEXT = re.compile('[^"\\\\\x00-\x1f]*')


def work_id_maker(
    campaign_id: str, policy_sha256: str, suite_sha256: str
) -> Callable[[str, str], str]:
    """``(locale, case key) -> work id``, equal to :func:`~benchledger.domain.campaign.work_id_for`.

    The canonical JSON of the binding is assembled around the two values that
    change per item (keys in sorted order), instead of re-encoding the whole
    object for every item.
    """
    head = (
        '{"campaign_id":'
        + json.dumps(campaign_id, ensure_ascii=False)
        + ',"policy_sha256":'
        + json.dumps(policy_sha256, ensure_ascii=False)
        + ',"suite_case_key":'
    )
    middle = ',"suite_sha256":' + json.dumps(suite_sha256, ensure_ascii=False) + ',"target_locale":'
    sha256 = hashlib.sha256
    dumps = json.dumps
    plain = _PLAIN_JSON_TEXT.fullmatch

    def quoted(value: str) -> str:
        # Text without quotes, backslashes or control characters encodes as itself.
        return '"' + value + '"' if plain(value) else dumps(value, ensure_ascii=False)

    def make(locale: str, case_key: str) -> str:
        text = head + quoted(case_key) + middle + quoted(locale) + "}"
        return dom.WORK_PREFIX + sha256(text.encode("utf-8")).hexdigest()

    return make


class ResultsDigest:
    """:func:`~benchledger.domain.campaign.results_sha256`, fed one digest at a time."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"[")
        self._first = True
        self.valid = True

    def add(self, digest: Any) -> None:
        if not is_sha256(digest):
            self.valid = False
            return
        self._hash.update((b'"' if self._first else b',"') + digest.encode("ascii") + b'"')
        self._first = False

    def extend(self, digests: Sequence[str]) -> None:
        """Add digests already known to be sha256 digests (each a result text's own)."""
        if not digests:
            return
        text = '","'.join(digests)
        self._hash.update(
            ('"' if self._first else ',"').encode("ascii") + text.encode("ascii") + b'"'
        )
        self._first = False

    def hexdigest(self) -> str | None:
        """The digest of every digest added, or ``None`` if one was not a sha256."""
        if not self.valid:
            return None
        final = self._hash.copy()
        final.update(b"]")
        return final.hexdigest()


_DUMPS = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode


def parse_stored_json(text: Any) -> Any:
    """Parse stored canonical JSON (as :func:`~benchledger.domain.canonical.parse_canonical_json`).

    Re-encoding and comparing the text is the check; only text with more
    opening brackets than the nesting limit needs the full structural walk.
    """
    if not isinstance(text, str):
        raise CanonicalJsonError("stored JSON must be text")
    try:
        value = json.loads(text)
        again = _DUMPS(value)
    except (ValueError, RecursionError):
        raise CanonicalJsonError("text is not canonical JSON") from None
    if again != text:
        raise CanonicalJsonError("text is not canonical JSON")
    if text.count("[") + text.count("{") > 64:
        canonical_json(value)  # the nesting limit (and every other rule)
    return value


# -- row checks ------------------------------------------------------------------------


def is_time(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def item_state_ok(row: Any) -> bool:
    """A work row's own invariants (status, attempts, lease, error and result fields, times).

    A leased row may still carry the previous attempt's error code (the legacy
    store left it there). Expired leases are not a problem of
    the row: health reports them.
    """
    status = row.status
    attempts, maximum = row.attempts, row.max_attempts
    if (  # the common case, a succeeded row, in one test
        status == WorkStatus.SUCCEEDED
        and type(attempts) is int
        and type(maximum) is int
        and 1 <= attempts <= maximum <= dom.MAX_ATTEMPTS
        and type(row.created_at) is float
        and type(row.updated_at) is float
        and type(row.next_attempt_at) is float
        and 0 <= row.created_at <= row.updated_at < math.inf
        and 0 <= row.next_attempt_at < math.inf
        and row.lease_owner is None
        and row.lease_token is None
        and row.lease_expires_at is None
        and row.last_error_code is None
        and row.last_error_detail_hash is None
        and type(row.result_json) is str
        and row.result_sha256 is not None
    ):
        return True
    if status not in dom.STATUSES or not (_is_int(attempts) and _is_int(maximum)):
        return False
    if not 0 <= attempts <= maximum <= dom.MAX_ATTEMPTS:
        return False
    created, updated = row.created_at, row.updated_at
    if not (is_time(created) and is_time(updated) and is_time(row.next_attempt_at)):
        return False
    if created > updated:
        return False
    if status == WorkStatus.LEASED:
        if not (
            attempts >= 1
            and dom.is_identifier(row.lease_owner)
            and dom.is_identifier(row.lease_token)
            and is_time(row.lease_expires_at)
        ):
            return False
    elif not (row.lease_owner is None and row.lease_token is None and row.lease_expires_at is None):
        return False
    code, detail = row.last_error_code, row.last_error_detail_hash
    if status == WorkStatus.PENDING:
        if attempts != 0 or code is not None:
            return False
    elif status in (WorkStatus.RETRY_WAIT, WorkStatus.FAILED):
        # A lost lease or a throttle gives its attempt back: waiting after one, an item
        # may have none.
        if code is None or (
            attempts < 1 and code != dom.LEASE_EXPIRED and not dom.is_throttle_code(code)
        ):
            return False
        if status == WorkStatus.RETRY_WAIT and attempts >= maximum:
            return False
    elif status == WorkStatus.SUCCEEDED and (code is not None or attempts < 1):
        return False
    if code is not None and not dom.is_error_code(code):
        return False
    if detail is not None and not is_sha256(detail):
        return False
    if status in (WorkStatus.PENDING, WorkStatus.SUCCEEDED) and detail is not None:
        return False
    if status == WorkStatus.SUCCEEDED:
        return isinstance(row.result_json, str) and row.result_sha256 is not None
    return row.result_json is None and row.result_sha256 is None and row.result_seal is None


def report_state_ok(row: Any, max_attempts: int) -> bool:
    """The report-finalization state's invariants, against the campaign's budget."""
    if row is None:
        return False
    status = row.status
    if status not in dom.STATUSES:
        return False
    if status == ReportStatus.LEASED:
        if not (
            dom.is_identifier(row.lease_owner)
            and dom.is_identifier(row.lease_token)
            and is_time(row.lease_expires_at)
        ):
            return False
    elif not (row.lease_owner is None and row.lease_token is None and row.lease_expires_at is None):
        return False
    attempts, maximum = row.attempts, row.max_attempts
    if not (_is_int(attempts) and _is_int(maximum)):
        return False
    if not (0 <= attempts <= maximum <= dom.MAX_ATTEMPTS and maximum == max_attempts):
        return False
    code, detail = row.last_error_code, row.last_error_detail_hash
    if status == ReportStatus.PENDING and (attempts != 0 or code is not None):
        return False
    if status != ReportStatus.PENDING and attempts < 1 and code != dom.REPORT_LEASE_EXPIRED:
        return False  # a lost lease gave its attempt back: waiting, it may have none
    if (status in (ReportStatus.RETRY_WAIT, ReportStatus.FAILED)) != (code is not None):
        return False
    if code is not None and not dom.is_error_code(code):
        return False
    if detail is not None and (
        not is_sha256(detail)
        or status in (ReportStatus.PENDING, ReportStatus.LEASED, ReportStatus.SUCCEEDED)
    ):
        return False
    if not (is_time(row.next_attempt_at) and is_time(row.created_at) and is_time(row.updated_at)):
        return False
    return bool(row.created_at <= row.updated_at)
