"""Errors with stable machine codes.

Every error the library raises on purpose is a :class:`LedgerError` with a
``code`` that callers may match on. Campaign codes are the stable
``benchmark.campaign.*`` names; study errors carry a category and an
HTTP-like status.
"""

from __future__ import annotations

import math
import re

ERROR_CODE = re.compile(r"^[a-z][a-z0-9_.-]{0,127}$")


def _checked_code(code: str) -> str:
    if not isinstance(code, str) or ERROR_CODE.fullmatch(code) is None:
        raise ValueError(f"error code is invalid: {code!r}")
    return code


class LedgerError(Exception):
    """Base of every deliberate benchledger error; ``code`` is stable."""

    def __init__(self, code: str, message: str | None = None) -> None:
        self.code = _checked_code(code)
        self.message = message or code
        super().__init__(self.message if message else code)

    def __str__(self) -> str:
        if self.message and self.message != self.code:
            return f"{self.code}: {self.message}"
        return self.code


class CampaignBlocked(LedgerError):
    """A content-free campaign failure, safe to show in operational status."""


#: The longest ``retry_after`` a dependency may ask for: a day (longer is cut to it).
MAX_RETRY_AFTER_SECONDS = 86_400.0


def _retry_after(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"retry_after must be a number of seconds or None, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"retry_after must be finite and >= 0, got {value!r}")
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


class DependencyFailed(LedgerError):
    """A failure declared by a host dependency, with explicit retry ownership.

    ``retry_after`` (seconds, optional): the dependency said when to try again
    (an HTTP ``Retry-After``). A retryable failure that carries one is a
    throttle (see :class:`Throttled`): the item goes back to the queue, due no
    earlier than that, without spending an attempt.
    """

    def __init__(
        self,
        code: str,
        *,
        retryable: bool,
        message: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        if not isinstance(retryable, bool):
            raise ValueError("dependency retryability must be boolean")
        super().__init__(code, message)
        self.retryable = retryable
        self.retry_after = _retry_after(retry_after)

    @property
    def throttled(self) -> bool:
        """Whether the item is handed back without spending an attempt."""
        return self.retryable and self.retry_after is not None


class Throttled(DependencyFailed):
    """The model's provider throttled the call (HTTP 429, a quota): try again later.

    Raised by an evaluator, it costs the item no attempt: the item goes back
    to the queue, due no earlier than ``retry_after`` seconds from now (the
    provider's ``Retry-After``), or after the worker's throttle backoff when
    ``None``. An item throttled more than its campaign's ``max_throttles``
    times (100 by default) counts each further throttle as a failed, retryable
    attempt (``benchmark.campaign.throttles_spent``). The item's error code is
    ``benchmark.campaign.throttled.<code>``.
    """

    def __init__(
        self,
        retry_after: float | None = None,
        *,
        code: str = "rate_limited",
        message: str | None = None,
    ) -> None:
        super().__init__(code, retryable=True, message=message, retry_after=retry_after)

    @property
    def throttled(self) -> bool:
        return True


class SchemaError(LedgerError):
    """The database schema is not one this version of benchledger can use."""


STUDY_STATUSES: dict[str, int] = {
    "invalid": 400,
    "forbidden": 403,
    "not_found": 404,
    "stale": 409,
    "conflict": 409,
    "incompatible": 409,
    "unsupported": 422,
    "unavailable": 503,
}


class StudyError(LedgerError):
    """A study-service refusal: its category (``code``) plus an HTTP-like status."""

    def __init__(self, message: str, code: str = "invalid", status: int | None = None) -> None:
        if code not in STUDY_STATUSES:
            raise ValueError(f"unknown study error category: {code!r}")
        super().__init__(code, message)
        self.status = STUDY_STATUSES[code] if status is None else status


# Codes raised outside the two domains (schema management).
SCHEMA_BEHIND = "ledger.schema.behind"
SCHEMA_AHEAD = "ledger.schema.ahead"
SCHEMA_UNKNOWN = "ledger.schema.unknown"

# Infrastructure: the database stayed away longer than a worker's outage budget.
DATABASE_UNAVAILABLE = "ledger.database.unavailable"
#: The database answered with an error that is not an outage (at start-up).
DATABASE_ERROR = "ledger.database.error"
#: ``Database(url)`` / ``AsyncDatabase(url)``: the URL (or ``pool_size``) is not usable.
DATABASE_URL_INVALID = "ledger.database.url_invalid"
#: ``Database(url)`` / ``AsyncDatabase(url)``: a backend or driver benchledger does not run on.
DATABASE_UNSUPPORTED = "ledger.database.unsupported"
#: ``Database(...)`` / ``AsyncDatabase(...)``: ``pool_size``, ``echo`` or ``engine`` is not usable.
DATABASE_OPTIONS_INVALID = "ledger.database.options_invalid"
#: The installed Python lacks the driver the URL names (e.g. psycopg).
DATABASE_DRIVER_MISSING = "ledger.database.driver_missing"
OUTAGE_INVALID = "ledger.input.outage_invalid"
