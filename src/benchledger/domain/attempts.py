"""A work item's attempt history: one row per attempt, what became of it and why.

The history is append-only and written in the same transaction as the outcome
it records (the item's completion or failure, or the takeover of an expired
lease), so it never says more or less than the items do; ``verify()`` checks
the two agree.
"""

from __future__ import annotations

import enum
import math
from typing import Any

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
