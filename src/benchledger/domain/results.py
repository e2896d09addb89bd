"""Per-case results: what each work item came to, read back for people and tools.

An :class:`ItemResult` is one row of ``CampaignService.results``: the item's
identity (locale, case key, work id), its status and attempts, the score and
verdict of its result (when it succeeded), its last error code, and what its
attempt history says (when it has one: items adopted from a legacy store, or
finished before the history existed, have none, and their counts are zero).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs

from benchledger.domain.attempts import Attempt, AttemptOutcome

#: A result passes when its ``passed`` is true or, without ``passed``, when its score is
#: at least this (the default report builder's ``pass_score``).
DEFAULT_PASS_SCORE: Final = 0.5


def result_score(result: Mapping[str, Any]) -> float | None:
    """The result's ``score`` when it is a finite number, else None."""
    score = result.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        return None
    return float(score) if math.isfinite(score) else None


def result_passed(result: Mapping[str, Any], pass_score: float = DEFAULT_PASS_SCORE) -> bool | None:
    """The result's verdict: its ``passed`` flag, else ``score >= pass_score``, else None."""
    passed = result.get("passed")
    if isinstance(passed, bool):
        return passed
    score = result_score(result)
    return None if score is None else score >= pass_score


def _counts(value: Mapping[str, int]) -> Mapping[str, int]:
    counts = {str(AttemptOutcome(key)): int(count) for key, count in value.items()}
    return {outcome.value: counts.get(outcome.value, 0) for outcome in AttemptOutcome}


@attrs.frozen
class ItemResult:
    """One work item of a campaign, as ``results`` pages through them."""

    work_id: str
    locale: str
    case_key: str
    status: str
    attempts: int
    score: float | None
    passed: bool | None
    error_code: str | None
    #: When its first recorded attempt was claimed, its last one finished (None: no history).
    first_attempt_at: float | None
    last_attempt_at: float | None
    #: How many recorded attempts ended each way (every AttemptOutcome, zero when none).
    outcomes: Mapping[str, int] = attrs.field(converter=_counts, factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A flat, JSON-ready mapping (the outcome counts as ``attempts_<outcome>``)."""
        flat: dict[str, Any] = {
            "locale": self.locale,
            "case_key": self.case_key,
            "work_id": self.work_id,
            "status": self.status,
            "attempts": self.attempts,
            "score": self.score,
            "passed": self.passed,
            "error_code": self.error_code,
            "first_attempt_at": self.first_attempt_at,
            "last_attempt_at": self.last_attempt_at,
        }
        for outcome, count in self.outcomes.items():
            flat[f"attempts_{outcome}"] = count
        return flat


#: The columns of :meth:`ItemResult.as_dict`, in order (CSV header, Arrow schema).
RESULT_COLUMNS: Final = (
    "locale",
    "case_key",
    "work_id",
    "status",
    "attempts",
    "score",
    "passed",
    "error_code",
    "first_attempt_at",
    "last_attempt_at",
    *(f"attempts_{outcome.value}" for outcome in AttemptOutcome),
)


@attrs.frozen
class ResultsPage:
    """One keyset page of ``results``: items in (locale, case key) order."""

    items: tuple[ItemResult, ...]
    #: Pass it as ``cursor`` for the next page; None on the last page.
    next_cursor: str | None


@attrs.frozen
class AttemptsPage:
    """One page of a campaign's attempt history, oldest first."""

    attempts: tuple[Attempt, ...]
    next_cursor: str | None
