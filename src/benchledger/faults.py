"""Transient database faults, and riding them out within an outage budget.

A worker must outlive a database restart, a terminated session, a refused
connection, a serialization failure or a lock timeout: none of them says
anything about the item being evaluated. :func:`is_transient` tells such a
fault from every other error, and :class:`Outage` retries a call through one
with capped exponential backoff and jitter until the database answers again,
or until the outage has lasted longer than its budget, when it raises
:class:`DatabaseUnavailable` (``ledger.database.unavailable``).

The connection pool reconnects by itself (on PostgreSQL a connection idle for
more than a second is pinged before use, and one a disconnect invalidated is
discarded), so retrying the same service call is all a caller needs to do.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import attrs
import sqlalchemy.exc as sa_exc

from benchledger.errors import DATABASE_ERROR, DATABASE_UNAVAILABLE, OUTAGE_INVALID, LedgerError

T = TypeVar("T")

log = logging.getLogger("benchledger.faults")

#: PostgreSQL SQLSTATEs that say "try again": serialization failure, deadlock,
#: lock not available (lock_timeout), statement cancelled (statement_timeout),
#: administrator/crash shutdown, the server starting up, too many connections.
#: Class 08 (connection exceptions) is transient as a whole.
_TRANSIENT_SQLSTATES: Final = frozenset(
    {"40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03", "53300"}
)
#: What SQLite's OperationalError says when another connection holds the lock
#: past the busy timeout, or the file is briefly out of reach.
_TRANSIENT_SQLITE_MESSAGES: Final = (
    "database is locked",
    "database table is locked",
    "database is busy",
    "disk i/o error",
    "unable to open database file",
)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is a database fault that retrying the same call can outlive.

    Disconnects, refused connections, server shutdowns and restarts,
    serialization failures, deadlocks, lock and statement timeouts, and an
    exhausted connection pool are; constraint violations, syntax errors, a
    missing table and every :class:`~benchledger.errors.LedgerError` are not.
    """
    if isinstance(error, sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    original = error.orig
    sqlstate = getattr(original, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES
    if isinstance(original, sqlite3.OperationalError):
        message = str(original).lower()
        return any(text in message for text in _TRANSIENT_SQLITE_MESSAGES)
    # psycopg raises OperationalError without a SQLSTATE when it cannot reach
    # the server at all (refused, reset, closed unexpectedly).
    return isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError)


class DatabaseUnavailable(LedgerError):
    """The database stayed unreachable for longer than the outage budget."""

    def __init__(self, message: str) -> None:
        super().__init__(DATABASE_UNAVAILABLE, message)


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise LedgerError(OUTAGE_INVALID, f"{attribute.name} must be a positive number of seconds")


@attrs.frozen
class OutagePolicy:
    """How long to ride out a database outage, and how to pace the retries.

    A retry waits ``min(max_delay, base_delay * 2**n)`` seconds, of which a
    random fraction up to ``jitter`` is taken off, so that many workers do not
    reconnect in lockstep. After ``budget_seconds`` without one successful
    call, the caller gets :class:`DatabaseUnavailable`.
    """

    budget_seconds: float = attrs.field(default=300.0, validator=_positive)
    base_delay: float = attrs.field(default=0.1, validator=_positive)
    max_delay: float = attrs.field(default=5.0, validator=_positive)
    jitter: float = attrs.field(default=0.5)

    @jitter.validator
    def _check_jitter(self, _attribute: attrs.Attribute[float], value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise LedgerError(OUTAGE_INVALID, "jitter must be a number in [0, 1]")

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th consecutive failure (1-based)."""
        delay = min(self.max_delay, self.base_delay * 2.0 ** min(failures - 1, 32))
        return float(delay * (1 - self.jitter * random.random()))


class Outage:
    """Retries calls through transient database faults within one outage budget.

    One instance follows one caller (a worker): the budget counts from the
    first failure of an outage and starts afresh after any successful call.
    ``sleep`` and ``monotonic`` are real time by default: an outage lasts in
    wall-clock time whatever clock the ledger itself is given.

    From asyncio code, :meth:`acall` and :meth:`afailed` apply the same rules
    and wait with :func:`asyncio.sleep` (or the ``asleep`` given) instead of
    blocking the event loop; sync code run on an async driver through
    SQLAlchemy's greenlet bridge passes a ``sleep`` that awaits (see
    :mod:`benchledger.aio`).
    """

    def __init__(
        self,
        policy: OutagePolicy | None = None,
        *,
        sleep: Callable[[float], object] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
        asleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.policy = policy or OutagePolicy()
        self._sleep = sleep
        self._asleep = asleep
        self._monotonic = monotonic
        self._log = logger
        self._started: float | None = None
        self._failures = 0
        self.faults = 0  # every transient fault seen, for summaries

    @property
    def ongoing(self) -> bool:
        return self._started is not None

    def succeeded(self) -> None:
        if self._started is not None:
            self._log.warning(
                "database reachable again after %.1f s (%d failed calls)",
                self._monotonic() - self._started,
                self._failures,
            )
        self._started = None
        self._failures = 0

    def failed(self, error: BaseException, what: str) -> None:
        """Record a transient fault and wait before the next try; raise when over budget.

        ``error`` must be transient (see :func:`is_transient`); anything else
        is re-raised as it is.
        """
        self._sleep(self._record(error, what))

    async def afailed(self, error: BaseException, what: str) -> None:
        """:meth:`failed` for asyncio code: the same rules, the wait awaited."""
        await self._asleep(self._record(error, what))

    def _record(self, error: BaseException, what: str) -> float:
        """Count a transient fault; the wait before the next try (raise when over budget)."""
        if not is_transient(error):
            raise error
        now = self._monotonic()
        if self._started is None:
            self._started = now
        self._failures += 1
        self.faults += 1
        elapsed = now - self._started
        if elapsed >= self.policy.budget_seconds:
            raise DatabaseUnavailable(
                f"the database was unreachable for {elapsed:.0f} s "
                f"(budget {self.policy.budget_seconds:.0f} s) during {what}: "
                f"{type(error).__name__}: {_first_line(error)}"
            ) from error
        delay = min(self.policy.delay(self._failures), self.policy.budget_seconds - elapsed)
        self._log.warning(
            "database fault during %s (%s: %s); retry %d in %.2f s",
            what,
            type(error).__name__,
            _first_line(error),
            self._failures,
            delay,
        )
        return delay

    def call(self, what: str, function: Callable[[], T]) -> T:
        """``function()``, retried through transient database faults."""
        while True:
            try:
                result = function()
            except Exception as error:
                self.failed(error, what)
                continue
            self.succeeded()
            return result

    async def acall(self, what: str, function: Callable[[], Awaitable[T]]) -> T:
        """``await function()``, retried through transient database faults (asyncio)."""
        while True:
            try:
                result = await function()
            except Exception as error:
                await self.afailed(error, what)
                continue
            self.succeeded()
            return result


#: How long a library constructor (``CampaignService(db)``, ``StudyService(db)``,
#: ``AsyncCampaignService.ready()``) and ``Database.upgrade()`` ride out an outage by
#: default: a restart of a few seconds, not the five minutes of a worker's run (a
#: program that cannot reach its database should hear so soon). Workers start with
#: their whole budget (:class:`OutagePolicy`'s default): see docs/operations.md.
STARTUP_OUTAGE: Final = OutagePolicy(budget_seconds=10.0, base_delay=0.1, max_delay=1.0)


def riding(
    outage: Outage | OutagePolicy | None,
    default: OutagePolicy = STARTUP_OUTAGE,
    *,
    sleep: Callable[[float], object] = time.sleep,
) -> Outage:
    """The outage a call rides: a running one as it is, else a new one of the policy
    given (``None``: ``default``) waiting with ``sleep``; anything else is
    ``ledger.input.outage_invalid``."""
    if isinstance(outage, Outage):
        return outage
    if outage is None:
        return Outage(default, sleep=sleep)
    if isinstance(outage, OutagePolicy):
        return Outage(outage, sleep=sleep)
    raise LedgerError(OUTAGE_INVALID, "outage must be an OutagePolicy (or None)")


def start_up(
    what: str,
    function: Callable[[], T],
    outage: Outage | OutagePolicy | None = None,
    *,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """``function()`` (a start-up check: the schema revision, an upgrade), through
    transient database faults within ``outage`` (default :data:`STARTUP_OUTAGE`).

    It never lets a raw SQLAlchemy error out: an outage longer than the budget is
    :class:`DatabaseUnavailable`; a database that refuses for good (authentication,
    no such database) is ``ledger.database.unavailable`` at once; any other database
    error ``ledger.database.error``. A :class:`LedgerError` goes through as it is.
    """
    tries = riding(outage, sleep=sleep)
    try:
        return tries.call(what, function)
    except LedgerError:
        raise
    except sa_exc.OperationalError as error:  # not transient: it will not pass by waiting
        raise DatabaseUnavailable(
            f"cannot use the database ({what}): {type(error.orig or error).__name__}: "
            f"{_first_line(error)}"
        ) from error
    except sa_exc.SQLAlchemyError as error:
        raise LedgerError(
            DATABASE_ERROR,
            f"the database refused {what}: {type(error).__name__}: {_first_line(error)}",
        ) from error


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error).strip()
    return (text.splitlines() or [""])[0][:200]
