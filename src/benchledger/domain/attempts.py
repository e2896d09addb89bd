"""A work item's attempt history: one row per attempt, what became of it and why.

The history is append-only and written in the same transaction as the outcome
it records (the item's completion or failure, or the takeover of an expired
lease), so it never says more or less than the items do; ``verify()`` checks
the two agree.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any, Final

import attrs


class AttemptOutcome(enum.StrEnum):
    """What became of one attempt at a work item."""

    #: The evaluator's result was recorded; the item is done.
    SUCCEEDED = "succeeded"
    #: The attempt failed and the item failed for good (no retry left, or not retryable).
    FAILED = "failed"
    #: The attempt failed; the item is due again after its backoff.
    RETRY_SCHEDULED = "retry_scheduled"
    #: The worker stopped renewing the lease (it died or lost its way); the lease was
    #: taken over after it expired.
    LEASE_EXPIRED = "lease_expired"
    #: An operator handed the item back (retry, requeue) while it was leased.
    RELEASED = "released"
    #: The model's provider throttled the call: the item was handed back, due after the
    #: provider's ``Retry-After``, without spending the attempt.
    THROTTLED = "throttled"


ATTEMPT_OUTCOMES: tuple[str, ...] = tuple(outcome.value for outcome in AttemptOutcome)


def _finite_nonnegative(_instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


@attrs.frozen
class Attempt:
    """One attempt at one work item, as the history recorded it."""

    work_id: str
    attempt: int = attrs.field(validator=attrs.validators.ge(1))
    worker_id: str | None
    claimed_at: float | None
    finished_at: float
    outcome: AttemptOutcome = attrs.field(converter=AttemptOutcome)
    error_code: str | None
    #: Seconds the evaluator ran, as its worker measured them (None: not measured).
    duration_seconds: float | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_finite_nonnegative),
    )


# Outcomes after which the next attempt may carry the same (or a lower) number: the item
# failed for good (an operator may set it back), or the attempt was given back.
_ENDS_A_RUN: Final = frozenset(
    {AttemptOutcome.FAILED, AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.THROTTLED}
)


def history_consistent(
    status: str, attempts: int, history: Sequence[tuple[int, str]], history_from: int = 0
) -> bool:
    """Whether an item's attempt history (``(attempt, outcome)`` rows in the order they
    were recorded) agrees with the item (its ``status`` and ``attempts`` count, and
    ``history_from``: the attempts it had when its history began, 0 for an item
    created since).

    The history is read as runs of attempts numbered one after another; an
    operator's retry starts a new run (the item's count was set back), and only
    a run that ended the item for good (failed, or its last lease lost) may be
    followed by one. The first row is the attempt after ``history_from`` (or,
    for an older item set back by an operator, one at or below it), and a run
    has no gap. Only the last row may
    be a success, and then the item succeeded at exactly that attempt; a failed
    or waiting item's last row is its last attempt; a leased item's is the one
    before the lease it holds.
    """
    if not history:
        # Nothing recorded: right only while no attempt since the history began ended.
        finished = attempts - 1 if status == "leased" else attempts
        return finished <= history_from
    first = history[0][0]
    if first != history_from + 1 and not (history_from > 0 and first <= history_from):
        return False  # its first recorded attempt is missing
    previous: tuple[int, str] | None = None
    for number, outcome in history:
        if number < 1 or outcome not in ATTEMPT_OUTCOMES:
            return False
        if previous is not None:
            before, ended = previous
            if ended == AttemptOutcome.SUCCEEDED:
                return False  # nothing follows a success
            if number != before + 1 and (number > before or ended not in _ENDS_A_RUN):
                return False  # a gap, or a new run after an attempt that did not end it
        previous = number, outcome
    last, outcome = history[-1]
    if status == "succeeded":
        return outcome == AttemptOutcome.SUCCEEDED and last == attempts
    if outcome == AttemptOutcome.SUCCEEDED:
        return False
    if outcome in _ENDS_A_RUN and last >= attempts and status != "failed":
        return True  # an operator set the count back: the history ends the run before
    if status in ("failed", "retry_wait"):
        return last == attempts
    if status == "leased":
        return last == attempts - 1
    return True  # pending: set back by an operator, the history is of the runs before
