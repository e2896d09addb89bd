"""Worker drivers: run one case, finalize one report, or loop until the campaign is done.

``run_next_case`` claims at most one item, evaluates it while a heartbeat keeps
the lease alive, and records the outcome: the result on success, or a failure
with this mapping of errors to codes and retryability:

- :class:`~benchledger.errors.DependencyFailed` -> ``benchmark.campaign.dependency.<code>``
  (``dependency_failed`` when that would exceed 128 characters), retryable as declared;
- ``validity_expired`` (policy expired mid-run) -> that code, not retryable;
- another :class:`~benchledger.errors.LedgerError` -> its own code, retryable if it
  says so (a boolean ``retryable`` attribute), else not;
- any other exception -> ``benchmark.campaign.unexpected``, retryable.

Other campaign errors (``lease_lost``, ``operation_guard_failed``) propagate:
the worker no longer holds the item, which comes back when its lease expires.
A result the service rejects (``result_invalid``, ``result_mismatch``,
``input_invalid``) is recorded as a retryable failure at once, instead of
leaving the item leased until its lease expires.

Database faults (disconnects, restarts, refused connections, serialization
failures, lock timeouts) are infrastructure, never an item's failure: the
drivers and :class:`Worker` ride them out within an outage budget
(:class:`~benchledger.faults.OutagePolicy`, five minutes by default) and then
stop with :class:`~benchledger.faults.DatabaseUnavailable`
(``ledger.database.unavailable``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol, TypeVar

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus, blocked
from benchledger.domain.campaign_results import CaseOutcome, ReportOutcome
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.errors import CampaignBlocked, DependencyFailed, LedgerError
from benchledger.faults import DatabaseUnavailable, Outage, OutagePolicy, is_transient
from benchledger.ports.campaign import Evaluate
from benchledger.services.campaigns import CampaignService

T = TypeVar("T")
Clock = Callable[[], float]
log = logging.getLogger("benchledger.worker")
OperationGuard = Callable[[float], Any]

#: The most cases one worker keeps in flight (``Worker(concurrency=...)``, AsyncWorker).
MAX_CONCURRENCY: Final = 1024

_RECORDED_REJECTIONS: Final = frozenset(
    {dom.RESULT_INVALID, dom.RESULT_MISMATCH, dom.INPUT_INVALID}
)


def retry_settings(
    lease_seconds: Any, base: Any, maximum: Any, jitter: Any, invalid: str = dom.RETRY_INVALID
) -> tuple[float, float, float, float]:
    """The drivers' lease and backoff settings, checked: (lease, base, maximum, jitter).

    Durations as :func:`~benchledger.domain.campaign.duration` (``duration_invalid``);
    ``invalid`` when the base exceeds the maximum or the jitter is not in [0, 1].
    """
    lease = dom.duration(lease_seconds)
    base = dom.duration(base, allow_zero=True)
    maximum = dom.duration(maximum, allow_zero=True)
    if base > maximum:
        raise blocked(invalid)
    if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
        raise blocked(invalid)
    return lease, base, maximum, float(jitter)


class Runtime:
    """How the drivers lock, wait and renew leases in the background: with threads.

    This is the default, for plain ``def`` evaluators (one case at a time, or
    several on a thread pool with ``Worker(concurrency=K)``).
    :mod:`benchledger.aio` runs the very same driver code on an asyncio event
    loop, through SQLAlchemy's greenlet bridge, with a runtime whose lock,
    sleep and heartbeat are asyncio's: the rules stay in one place.
    """

    def __init__(self) -> None:
        self._idle: list[_Heartbeat] = []
        self._idle_lock = threading.Lock()
        forget = weakref.WeakMethod(self._forget_heartbeats)
        # A forked child has none of this process's threads (multiprocessing's fork).
        os.register_at_fork(after_in_child=lambda: _call_if_alive(forget))

    def lock(self) -> AbstractContextManager[Any]:
        """A lock around one lease's renewal (the heartbeat and the evaluator share it)."""
        return threading.Lock()

    def sleep(self, seconds: float) -> None:
        """How a retry through a database fault waits."""
        time.sleep(seconds)

    def pulse(self) -> Pulse:
        """How idle lanes wait for word that work may be due (``Worker(concurrency=K)``)."""
        return _ThreadPulse()

    def start_beat(self, keeper: _LeaseKeeper) -> Callable[[], None]:
        """Renew ``keeper``'s lease in the background; returns how to stop (and wait for) it.

        The heartbeat thread outlives the case: stopped, it waits for the next
        case's keeper (a thread started and joined per case cost about a tenth of a
        millisecond, as much as a quick case's evaluation).
        """
        heartbeat = self._take_idle() or _Heartbeat()
        heartbeat.start(keeper)

        def halt() -> None:
            heartbeat.stop()
            with self._idle_lock:
                self._idle.append(heartbeat)

        return halt

    def _take_idle(self) -> _Heartbeat | None:
        with self._idle_lock:
            while self._idle:
                heartbeat = self._idle.pop()
                if heartbeat.thread.is_alive():
                    return heartbeat
        return None

    def _forget_heartbeats(self) -> None:
        self._idle = []
        self._idle_lock = threading.Lock()


def _call_if_alive(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    bound = method()
    if bound is not None:
        bound()


class _Heartbeat:
    """A background thread renewing the lease of the keeper it was given, if any.

    ``start`` hands it a keeper: it renews that lease every ``keeper.next_wait()``
    seconds until ``stop``, or until a renewal fails (the keeper keeps the
    failure for its driver). ``stop`` returns once no renewal is running.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._keeper: _LeaseKeeper | None = None
        self._renewing = False
        self.thread = threading.Thread(target=self._run, name="benchledger-heartbeat", daemon=True)
        self.thread.start()

    def start(self, keeper: _LeaseKeeper) -> None:
        with self._condition:
            self._keeper = keeper
            self._condition.notify_all()

    def stop(self) -> None:
        with self._condition:
            self._keeper = None
            self._condition.notify_all()
            while self._renewing:
                self._condition.wait()

    def _run(self) -> None:
        condition = self._condition
        with condition:
            while True:
                keeper = self._keeper
                if keeper is None:
                    condition.wait()
                    continue
                due = time.monotonic() + keeper.next_wait()
                while self._keeper is keeper and (left := due - time.monotonic()) > 0:
                    condition.wait(left)
                if self._keeper is not keeper:
                    continue  # stopped, or already given the next case's keeper
                self._renewing = True
                condition.release()
                try:
                    going_on = keeper.beat()
                finally:
                    condition.acquire()
                    self._renewing = False
                    condition.notify_all()
                if not going_on and self._keeper is keeper:
                    self._keeper = None  # a failed renewal ends this lease's heartbeat


class Pulse(Protocol):
    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the next :meth:`pulse`; whether it came."""

    def pulse(self) -> None:
        """Wake every lane waiting now."""


class _ThreadPulse:
    def __init__(self) -> None:
        self._condition = threading.Condition()

    def wait(self, timeout: float) -> bool:
        with self._condition:
            return self._condition.wait(timeout)

    def pulse(self) -> None:
        with self._condition:
            self._condition.notify_all()


THREADS: Final = Runtime()


#: The share of a lease that may be gone before the check before work writes it
#: again (see ``_LeaseKeeper.renew``).
FRESH_LEASE_SHARE: Final = 0.01


class _LeaseKeeper:
    """Renews one lease: on demand (the evaluator's heartbeat) and in the background.

    A renewal first checks the policy is still valid and runs the host's
    operation guard. The first failure stops the background thread and is
    re-raised to the driver when it stops the keeper.

    A transient database fault (see :func:`~benchledger.faults.is_transient`)
    is not a failure while the lease is still live: the lease stays ours until
    ``lease_expires_at`` whether or not the database answers, so the keeper
    logs the fault, keeps the last lease and the background thread tries again
    soon. Once the lease has expired without a renewal the keeper raises
    ``lost_code`` (``lease_lost`` / ``report_lease_lost``).
    """

    def __init__(
        self,
        renew: Callable[[Any, float], Any],
        claim: Any,
        *,
        clock: Clock,
        valid_until: float,
        lease_seconds: float,
        interval: float,
        operation_guard: OperationGuard | None,
        outage: Outage,
        lost_code: str,
        runtime: Runtime = THREADS,
    ) -> None:
        self.active = claim
        self.lost_code = lost_code
        self._renew_lease = renew
        self._clock = clock
        self._valid_until = valid_until
        self._lease_seconds = lease_seconds
        self._interval = interval
        self._guard = operation_guard
        self._outage = outage
        self._faults = 0  # consecutive transient faults since the last renewal
        self._runtime = runtime
        self._lock = runtime.lock()
        self._error: BaseException | None = None
        self._halt: Callable[[], None] | None = None

    def renew(self, *, before_work: bool = False) -> None:
        """Check the policy's validity and the operation guard, then renew the lease.

        ``before_work``: the check before the evaluator starts. A lease that has
        lost less than ``FRESH_LEASE_SHARE`` of its length since it was granted is
        not written again: the claim that granted it just proved it ours, and a
        write would move its expiry by that sliver (a third of a case's write
        transactions, on the hot path).
        """
        with self._lock:
            if self._error is not None:
                raise self._error
            try:
                now = dom.timestamp(self._clock())
                if now > self._valid_until:
                    raise blocked(dom.VALIDITY_EXPIRED)
                if self._guard is not None:
                    try:
                        self._guard(self._lease_seconds)
                    except Exception:
                        raise blocked(dom.OPERATION_GUARD_FAILED) from None
                left = float(self.active.lease_expires_at) - now
                if before_work and left >= self._lease_seconds * (1 - FRESH_LEASE_SHARE):
                    return
                try:
                    self.active = self._renew_lease(self.active, now)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    self.check_live(error, now)
                    self._faults += 1
                    log.warning(
                        "lease renewal hit a database fault (%s); the lease is ours "
                        "for %.1f s more, retrying",
                        type(error).__name__,
                        float(self.active.lease_expires_at) - now,
                    )
                else:
                    self._faults = 0
            except BaseException as error:
                self._error = error
                raise

    def check_live(self, error: BaseException, now: float) -> None:
        """Raise ``lost_code`` (from ``error``) once the lease has expired at ``now``."""
        if now >= float(self.active.lease_expires_at):
            raise blocked(self.lost_code) from error

    def next_wait(self) -> float:
        """Seconds until the next background renewal (sooner while riding out a fault)."""
        wait = self._interval
        if self._faults:
            wait = min(wait, self._outage.policy.delay(self._faults))
        return wait

    def beat(self) -> bool:
        """One background renewal; whether to go on (a failure stops the background)."""
        try:
            self.renew()
        except BaseException:
            return False
        return True

    def __enter__(self) -> _LeaseKeeper:
        self._halt = self._runtime.start_beat(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._halt is not None:
            halt, self._halt = self._halt, None
            halt()

    def raise_failure(self) -> None:
        """Re-raise a failed background renewal (after the keeper stopped)."""
        if self._error is not None:
            raise self._error

    def write(self, what: str, write: Callable[[float], T]) -> T:
        """``write(now)`` under this lease, retried through database faults while it lives.

        A computed result is worth keeping: the write is tried again (with the
        outage's backoff) as long as the lease has not expired and the outage
        budget lasts. A retry after a commit whose acknowledgement was lost
        finds the lease gone and raises ``lost_code``, like any lost lease.
        """
        while True:
            now = dom.timestamp(self._clock())
            try:
                result = write(now)
            except Exception as error:
                if not is_transient(error):
                    raise
                self.check_live(error, now)
                self._outage.failed(error, what)
                continue
            self._outage.succeeded()
            return result


def _failure_for(error: BaseException) -> tuple[str, bool]:
    """Map an evaluation error to (code, retryable); re-raise what is not the item's failure.

    Whatever ``evaluate`` raises is the evaluation's failure, its own database
    errors included; the ledger's faults never reach here, since the lease
    keeper rides them out and raises ``lease_lost`` once the lease is gone.
    """
    if isinstance(error, DependencyFailed):
        return dom.dependency_code(error.code), error.retryable
    if isinstance(error, CampaignBlocked):
        if error.code == dom.VALIDITY_EXPIRED:
            return error.code, False
        raise error
    if isinstance(error, LedgerError):
        declared = getattr(error, "retryable", None)
        return error.code, declared if isinstance(declared, bool) else False
    if getattr(error, "benchmark_campaign_dependency_failure", None) is True:
        code = getattr(error, "code", None)
        retryable = getattr(error, "retryable", None)
        if dom.is_error_code(code) and isinstance(retryable, bool):
            return dom.dependency_code(str(code)), retryable
    if not isinstance(error, Exception):
        raise error  # KeyboardInterrupt, SystemExit: not an evaluation failure
    return dom.UNEXPECTED, True


def _outage_of(outage: Outage | OutagePolicy | None, runtime: Runtime = THREADS) -> Outage:
    if outage is None or isinstance(outage, OutagePolicy):
        return Outage(outage, sleep=runtime.sleep)
    if isinstance(outage, Outage):
        return outage
    raise blocked(dom.DEPENDENCY_INVALID)


def run_next_case(
    campaigns: CampaignService,
    campaign_id: str,
    worker_id: str,
    evaluate: Evaluate,
    clock: Clock = time.time,
    *,
    lease_seconds: float = 300,
    retry_base_seconds: float = 5,
    retry_max_seconds: float = 3600,
    retry_jitter: float = 0.0,
    heartbeat_seconds: float | None = None,
    operation_guard: OperationGuard | None = None,
    outage: Outage | OutagePolicy | None = None,
) -> CaseOutcome | None:
    """Claim, evaluate and record at most one case; ``None`` when no case is due.

    ``evaluate(claim, heartbeat)`` returns the result mapping. The lease is
    renewed once before it starts (policy still valid, ``operation_guard``
    agrees, lease still ours); while it runs, the lease is renewed every
    ``heartbeat_seconds`` (default: a third of the lease) in the background,
    and whenever it calls ``heartbeat()``. A failed
    attempt is retried after ``min(retry_max, retry_base * 2**(attempt-1))``
    seconds, plus up to ``retry_jitter`` x that at random.

    Database faults are not the item's: the claim is retried through them
    within ``outage`` (an :class:`~benchledger.faults.OutagePolicy`, default
    five minutes), a renewal that meets one keeps the live lease, and the
    result (or failure) is written again until the lease expires. Past the
    budget, :class:`~benchledger.faults.DatabaseUnavailable` propagates.
    """
    return _run_case(
        campaigns,
        campaign_id,
        worker_id,
        evaluate,
        clock,
        lease_seconds=lease_seconds,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        retry_jitter=retry_jitter,
        heartbeat_seconds=heartbeat_seconds,
        operation_guard=operation_guard,
        outage=outage,
        runtime=THREADS,
    )


def _run_case(
    campaigns: CampaignService,
    campaign_id: str,
    worker_id: str,
    evaluate: Evaluate,
    clock: Clock,
    *,
    lease_seconds: float,
    retry_base_seconds: float,
    retry_max_seconds: float,
    retry_jitter: float,
    heartbeat_seconds: float | None,
    operation_guard: OperationGuard | None,
    outage: Outage | OutagePolicy | None,
    runtime: Runtime,
) -> CaseOutcome | None:
    if not isinstance(campaigns, CampaignService):
        raise blocked(dom.DEPENDENCY_INVALID)
    if not callable(evaluate) or not callable(clock):
        raise blocked(dom.DEPENDENCY_INVALID)
    if operation_guard is not None and not callable(operation_guard):
        raise blocked(dom.DEPENDENCY_INVALID)
    riding = _outage_of(outage, runtime)
    lease, base, maximum, jitter = retry_settings(
        lease_seconds, retry_base_seconds, retry_max_seconds, retry_jitter, dom.RETRY_INVALID
    )
    interval = lease / 3 if heartbeat_seconds is None else dom.duration(heartbeat_seconds)
    claim = riding.call(
        "claim",
        lambda: campaigns.claim(
            campaign_id, worker_id, now=dom.timestamp(clock()), lease_seconds=lease
        ),
    )
    if claim is None:
        return None
    keeper = _LeaseKeeper(
        lambda active, now: campaigns.renew(active, now=now, lease_seconds=lease),
        claim,
        clock=clock,
        valid_until=riding.call("policy read", lambda: campaigns.policy(campaign_id).valid_until),
        lease_seconds=lease,
        interval=interval,
        operation_guard=operation_guard,
        outage=riding,
        lost_code=dom.LEASE_LOST,
        runtime=runtime,
    )
    detail: str | None = None
    try:
        # Check before any work: the policy is still valid, the host's operation
        # guard agrees, and the lease is ours (renewed unless just granted), even
        # if ``evaluate`` returns before the first heartbeat.
        keeper.renew(before_work=True)
        with keeper:
            result: Mapping[str, Any] = evaluate(claim, keeper.renew)
        keeper.raise_failure()
    except BaseException as error:
        code, retryable = _failure_for(error)
        detail = type(error).__name__ if code == dom.UNEXPECTED else None
    else:
        try:
            return keeper.write(
                "result write", lambda now: campaigns.complete(keeper.active, result, now=now)
            )
        except CampaignBlocked as error:
            if error.code == dom.VALIDITY_EXPIRED:
                code, retryable = error.code, False
            elif error.code in _RECORDED_REJECTIONS:
                code, retryable = error.code, True
            else:
                raise
    delay = dom.retry_delay(claim.attempt, base, maximum, jitter=jitter)
    return keeper.write(
        "failure write",
        lambda now: campaigns.fail(
            keeper.active,
            code,
            retryable=retryable,
            delay_seconds=delay,
            detail=detail,
            now=now,
        ),
    )


#: Report errors that are not the report's failure: the worker no longer holds it.
_REPORT_LOST: Final = frozenset({dom.REPORT_LEASE_LOST, dom.REPORT_CLAIM_LOST})


def run_report_finalization(
    campaigns: CampaignService,
    campaign_id: str,
    worker_id: str,
    clock: Clock = time.time,
    *,
    lease_seconds: float = 300,
    retry_base_seconds: float = 5,
    retry_max_seconds: float = 3600,
    operation_guard: OperationGuard | None = None,
    outage: Outage | OutagePolicy | None = None,
) -> ReportOutcome | None:
    """Finalize the report in at most one leased attempt; ``None`` if none is due.

    Builds (or re-verifies) the report with ``summarize`` while the report
    lease is renewed in the background (every third of the lease), then
    completes the lease. A failure is recorded with the error's code: terminal
    for ``policy_mismatch``, ``report_invalid``, ``report_state_invalid``,
    ``state_invalid`` and ``validity_expired`` (and for an error that declares
    ``retryable=False``, such as a non-retryable
    :class:`~benchledger.errors.DependencyFailed` from the report builder),
    otherwise retried with backoff.

    A lost report lease (``report_lease_lost``) propagates: another worker
    has the report. A database fault costs the report no attempt: the build
    and the writes are retried through it while the lease lives and the
    ``outage`` budget lasts, after which
    :class:`~benchledger.faults.DatabaseUnavailable` propagates.
    """
    return _run_report(
        campaigns,
        campaign_id,
        worker_id,
        clock,
        lease_seconds=lease_seconds,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        operation_guard=operation_guard,
        outage=outage,
        runtime=THREADS,
    )


def _run_report(
    campaigns: CampaignService,
    campaign_id: str,
    worker_id: str,
    clock: Clock,
    *,
    lease_seconds: float,
    retry_base_seconds: float,
    retry_max_seconds: float,
    operation_guard: OperationGuard | None,
    outage: Outage | OutagePolicy | None,
    runtime: Runtime,
) -> ReportOutcome | None:
    if not isinstance(campaigns, CampaignService) or not callable(clock):
        raise blocked(dom.REPORT_DEPENDENCY_INVALID)
    if operation_guard is not None and not callable(operation_guard):
        raise blocked(dom.REPORT_DEPENDENCY_INVALID)
    riding = _outage_of(outage, runtime)
    lease, base, maximum, _ = retry_settings(
        lease_seconds, retry_base_seconds, retry_max_seconds, 0.0, dom.REPORT_RETRY_INVALID
    )
    claim = riding.call(
        "report claim",
        lambda: campaigns.claim_report(
            campaign_id, worker_id, now=dom.timestamp(clock()), lease_seconds=lease
        ),
    )
    if claim is None:
        return None
    keeper = _LeaseKeeper(
        lambda active, now: campaigns.renew_report(active, now=now, lease_seconds=lease),
        claim,
        clock=clock,
        valid_until=riding.call("policy read", lambda: campaigns.policy(campaign_id).valid_until),
        lease_seconds=lease,
        interval=lease / 3,
        operation_guard=operation_guard,
        outage=riding,
        lost_code=dom.REPORT_LEASE_LOST,
        runtime=runtime,
    )
    try:
        keeper.renew()
        with keeper:
            keeper.write(
                "report build",
                lambda now: campaigns.summarize(campaign_id, now=now, operation_guard=keeper.renew),
            )
        keeper.raise_failure()
        return keeper.write(
            "report completion", lambda now: campaigns.complete_report(keeper.active, now=now)
        )
    except Exception as error:
        code = getattr(error, "code", None)
        if isinstance(error, DatabaseUnavailable) or is_transient(error):
            raise
        if code in _REPORT_LOST or code == dom.OPERATION_GUARD_FAILED:
            raise
        if not dom.is_error_code(code):
            code = dom.REPORT_UNEXPECTED
        declared = getattr(error, "retryable", None)
        retryable = code not in dom.TERMINAL_REPORT_CODES and declared is not False
        delay = dom.retry_delay(keeper.active.attempt, base, maximum) if retryable else 0.0
        detail = type(error).__name__
        return keeper.write(
            "report failure write",
            lambda now: campaigns.fail_report(
                keeper.active,
                str(code),
                retryable=retryable,
                delay_seconds=delay,
                detail=detail,
                now=now,
            ),
        )


@attrs.frozen
class WorkerProgress:
    """What a :class:`Worker` reports after each case and after each report attempt."""

    event: str  # "case" or "report"
    cases: int
    succeeded: int
    retrying: int
    failed: int
    outcome: CaseOutcome | ReportOutcome | None  # None: the lease (or report lease) was lost
    lost: int = 0
    lost_reports: int = 0


@attrs.frozen
class WorkerSummary:
    cases: int
    succeeded: int
    retrying: int
    failed: int
    report: ReportOutcome | None
    lost: int = 0  # cases whose lease expired and went to another worker meanwhile
    stopped: bool = False  # ``should_stop`` ended the run
    lost_reports: int = 0  # report attempts whose lease expired or went to another worker


@attrs.define
class _Tally:
    """One run's counts, shared by its lanes (one per case in flight)."""

    cases: int = 0
    succeeded: int = 0
    retrying: int = 0
    failed: int = 0
    lost: int = 0
    lost_reports: int = 0
    report: ReportOutcome | None = None
    started: int = 0  # claims tried or in flight, against max_cases
    stop: bool = False  # a lane ended on an error: the others claim nothing more
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    # Idle lanes (nothing due): one watches the campaign's status, the others wait
    # for its word (a pulse) instead of all polling the database.
    work: Pulse | None = None
    watching: bool = False
    finished: bool = False

    def take_watch(self) -> bool:
        """Become the lane that watches the campaign, unless another one is."""
        with self.lock:
            if self.watching:
                return False
            self.watching = True
            return True

    def drop_watch(self) -> None:
        with self.lock:
            self.watching = False

    def reserve(self, max_cases: int | None) -> bool:
        """Take one of ``max_cases`` before a claim; ``False`` when none is left."""
        with self.lock:
            if max_cases is not None and self.started >= max_cases:
                return False
            self.started += 1
            return True

    def release(self) -> None:
        """Give back a reservation whose claim found nothing due."""
        with self.lock:
            self.started -= 1

    def progress(self, event: str, outcome: CaseOutcome | ReportOutcome | None) -> WorkerProgress:
        return WorkerProgress(
            event,
            self.cases,
            self.succeeded,
            self.retrying,
            self.failed,
            outcome,
            self.lost,
            self.lost_reports,
        )


class Worker:
    """Runs a campaign's cases (one by one, or ``concurrency`` at a time), then its report.

    By default ``run`` returns as soon as no case is due, after one report
    attempt if every item has succeeded. With ``until_finished=True`` it keeps
    going until the campaign is finished: the report is finalized (or failed
    for good), or every item is final and some failed (blocked for good).
    Meanwhile it waits for retries that are not due yet and for leases held
    elsewhere (another process or machine may crash and leave its item to
    come back): it sleeps until the campaign's ``next_due_at`` (see
    :class:`~benchledger.domain.campaign.CampaignStatus`), at most
    ``poll_seconds`` at a time, since other workers can make work due sooner
    (a failed attempt's retry, the last success making the report due).
    With ``finalize_report=False`` it leaves the report to other workers and
    waits, like for any other work, until one of them has finalized it.

    ``should_stop`` (optional, e.g. ``threading.Event().is_set``) is checked
    before every claim and report attempt, never during one: once it says
    true, the worker finishes the case it holds (recording its result or
    failure, so no lease is left held) and returns. ``sleep(seconds)`` is how
    an idle worker waits (default :func:`time.sleep`); pass the stop event's
    ``wait`` to wake at once when asked to stop, or a test clock's ``advance``.

    ``progress`` (optional) is called with a :class:`WorkerProgress` after every
    case and after every report attempt. ``max_cases`` bounds one ``run``.

    ``concurrency=K`` keeps up to K cases in flight in this process: K lanes
    on a thread pool, each running the loop above (claim, evaluate under its
    own lease keeper, record) with the same stop, retry, fault and lost-lease
    rules; for a plain ``def evaluate`` that blocks on I/O (an HTTP call to a
    model). ``evaluate`` and ``progress`` are then called from several threads
    (``progress`` one call at a time). A case holds a database connection only
    while one of its short transactions runs, so a pool of a few connections
    serves many cases (``Database(pool_size=...)``; a case that finds none free
    waits its turn). For ``async def`` evaluators see
    :class:`benchledger.aio.AsyncWorker`.

    A case whose lease is lost meanwhile (``lease_lost``: it expired and the
    item went back to the queue, maybe to another worker) is counted as
    ``lost`` and the loop goes on; so is a lost report lease (``lost_reports``).
    The loop still ends: every claim spends one of an item's bounded attempts. Other errors
    (``operation_guard_failed``, ``validity_expired`` on claim, ...) propagate.

    Database faults never end the run nor cost an item an attempt: every call
    the worker makes is retried through them with capped, jittered backoff
    (each logged on the ``benchledger`` loggers) for as long as ``outage``
    allows (an :class:`~benchledger.faults.OutagePolicy`; five minutes of
    continuous outage by default). A result computed meanwhile is kept and
    written once the database is back, if its lease still lives. When the
    database stays away longer, ``run`` raises
    :class:`~benchledger.faults.DatabaseUnavailable`
    (``ledger.database.unavailable``).
    """

    def __init__(
        self,
        campaigns: CampaignService,
        campaign_id: str,
        worker_id: str,
        evaluate: Evaluate,
        *,
        clock: Clock = time.time,
        lease_seconds: float = 300,
        retry_base_seconds: float = 5,
        retry_max_seconds: float = 3600,
        retry_jitter: float = 0.0,
        heartbeat_seconds: float | None = None,
        operation_guard: OperationGuard | None = None,
        progress: Callable[[WorkerProgress], Any] | None = None,
        max_cases: int | None = None,
        finalize_report: bool = True,
        until_finished: bool = False,
        should_stop: Callable[[], bool] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        poll_seconds: float = 1.0,
        outage: OutagePolicy | None = None,
        concurrency: int = 1,
    ) -> None:
        if not isinstance(campaigns, CampaignService) or not callable(evaluate):
            raise blocked(dom.DEPENDENCY_INVALID)
        for value in (progress, should_stop):
            if value is not None and not callable(value):
                raise blocked(dom.DEPENDENCY_INVALID)
        if not callable(sleep) or not callable(clock):
            raise blocked(dom.DEPENDENCY_INVALID)
        if operation_guard is not None and not callable(operation_guard):
            raise blocked(dom.DEPENDENCY_INVALID)
        if max_cases is not None and (
            isinstance(max_cases, bool) or not isinstance(max_cases, int) or max_cases < 0
        ):
            raise blocked(dom.WORKER_SETTING_INVALID)
        if not isinstance(finalize_report, bool) or not isinstance(until_finished, bool):
            raise blocked(dom.WORKER_SETTING_INVALID)
        if (
            isinstance(concurrency, bool)
            or not isinstance(concurrency, int)
            or not 1 <= concurrency <= MAX_CONCURRENCY
        ):
            raise blocked(dom.WORKER_SETTING_INVALID)
        if outage is not None and not isinstance(outage, OutagePolicy):
            raise blocked(dom.DEPENDENCY_INVALID)
        retry_settings(lease_seconds, retry_base_seconds, retry_max_seconds, retry_jitter)
        if heartbeat_seconds is not None:
            dom.duration(heartbeat_seconds)
        self.outage = Outage(outage, sleep=self._runtime.sleep)
        self.concurrency = concurrency
        self.campaigns = campaigns
        self.campaign_id = campaign_id
        self.worker_id = dom.identifier(worker_id)
        self.evaluate = evaluate
        self.clock = clock
        self.progress = progress
        self.max_cases = max_cases
        self.finalize_report = finalize_report
        self.until_finished = until_finished
        self.should_stop = should_stop
        self.sleep = sleep
        self.poll_seconds = dom.duration(poll_seconds)
        self._case_options: dict[str, Any] = {
            "lease_seconds": lease_seconds,
            "retry_base_seconds": retry_base_seconds,
            "retry_max_seconds": retry_max_seconds,
            "retry_jitter": retry_jitter,
            "heartbeat_seconds": heartbeat_seconds,
            "operation_guard": operation_guard,
            "outage": self.outage,
        }
        self._report_options: dict[str, Any] = {
            "lease_seconds": lease_seconds,
            "retry_base_seconds": retry_base_seconds,
            "retry_max_seconds": retry_max_seconds,
            "operation_guard": operation_guard,
            "outage": self.outage,
        }

    def _status(self) -> CampaignStatus:
        return self.campaigns.status(self.campaign_id)

    #: How this worker locks, waits and keeps leases (threads; benchledger.aio: asyncio).
    _runtime: Runtime = THREADS

    def _stop_requested(self, tally: _Tally) -> bool:
        return tally.stop or (self.should_stop is not None and bool(self.should_stop()))

    def _notify(
        self, tally: _Tally, event: str, outcome: CaseOutcome | ReportOutcome | None
    ) -> None:
        if self.progress is not None:
            self.progress(tally.progress(event, outcome))

    def _next_case(self, tally: _Tally) -> bool:
        """Run one due case, if any; whether there was one."""
        try:
            outcome = _run_case(
                self.campaigns,
                self.campaign_id,
                self.worker_id,
                self.evaluate,
                self.clock,
                **self._case_options,
                runtime=self._runtime,
            )
        except CampaignBlocked as error:
            if error.code != dom.LEASE_LOST:
                raise
            outcome = None
            with tally.lock:
                tally.lost += 1
        else:
            if outcome is None:
                return False
        with tally.lock:
            if outcome is not None:
                tally.succeeded += outcome.status == WorkStatus.SUCCEEDED
                tally.retrying += outcome.status == WorkStatus.RETRY_WAIT
                tally.failed += outcome.status == WorkStatus.FAILED
            tally.cases += 1
            self._notify(tally, "case", outcome)
        return True

    def _finalize(self, tally: _Tally) -> ReportOutcome | None:
        """One report-finalization attempt; ``None`` if none was due or the lease was lost."""
        try:
            report = _run_report(
                self.campaigns,
                self.campaign_id,
                self.worker_id,
                self.clock,
                **self._report_options,
                runtime=self._runtime,
            )
        except CampaignBlocked as error:
            if error.code not in _REPORT_LOST:
                raise
            report = None
            with tally.lock:
                tally.lost_reports += 1
        with tally.lock:
            tally.report = report or tally.report
            self._notify(tally, "report", report)
        return report

    def _wait(self, next_due_at: float, looked_at: float) -> None:
        """Sleep until ``next_due_at``, at most ``poll_seconds``.

        Work that was already due when this worker last looked, and yet it
        got none (another worker was taking it), is looked at again after
        ``poll_seconds``, so the loop never spins.
        """
        if next_due_at <= looked_at:
            delay = self.poll_seconds
        else:
            delay = min(self.poll_seconds, next_due_at - dom.timestamp(self.clock()))
        if delay > 0:
            self.sleep(delay)

    def run(self) -> WorkerSummary:
        tally = _Tally(work=self._runtime.pulse())
        if self.concurrency == 1:
            stopped = self._lane(tally)
        else:
            with ThreadPoolExecutor(
                self.concurrency, thread_name_prefix="benchledger-case"
            ) as pool:
                lanes = [pool.submit(self._guarded_lane, tally) for _ in range(self.concurrency)]
                ends = [lane.result() for lane in lanes]
            stopped = self._lanes_ended(tally, ends)
        return self._finish(tally, stopped)

    def _guarded_lane(self, tally: _Tally) -> bool | BaseException:
        """A lane of many: an error stops the other lanes (they finish their case)."""
        try:
            return self._lane(tally)
        except BaseException as error:
            tally.stop = True
            return error

    def _lanes_ended(self, tally: _Tally, ends: list[bool | BaseException]) -> bool:
        """Whether the lanes were stopped; the first lane's error, raised, if one failed."""
        for end in ends:
            if isinstance(end, BaseException):
                raise end
        return any(ends)

    def _lane(self, tally: _Tally) -> bool:
        """Claim, evaluate and record cases until done or stopped; whether it was stopped."""
        while not (stopped := self._stop_requested(tally)):
            if not tally.reserve(self.max_cases):
                break
            looked_at = dom.timestamp(self.clock())
            if self._next_case(tally):
                if tally.work is not None and self.concurrency > 1:
                    tally.work.pulse()  # work came due: idle lanes try for more
                continue
            tally.release()
            if not self.until_finished:
                break
            if not tally.take_watch():
                # Another idle lane watches the campaign; wait for its word.
                self._idle(tally)
                if tally.finished:
                    break
                continue
            try:
                if not self._watch(tally, looked_at):
                    break
            finally:
                tally.drop_watch()
        return stopped

    def _watch(self, tally: _Tally, looked_at: float) -> bool:
        """The watching lane's look at the campaign: the report if due, else wait for work.

        Whether to go on (``False``: finished, the report is final or the
        campaign is blocked for good).
        """
        status = self.outage.call("status read", lambda: self.campaigns.status(self.campaign_id))
        if status.next_due_at is None:
            tally.finished = True
            if tally.work is not None:
                tally.work.pulse()
            return False
        now = dom.timestamp(self.clock())
        if (
            self.finalize_report
            and status.complete
            and status.next_due_at <= now
            and self._finalize(tally) is not None
        ):
            return True
        self._wait(status.next_due_at, looked_at)
        return True

    def _idle(self, tally: _Tally) -> None:
        """Wait while another lane watches: until its pulse, it stops watching, or a stop."""
        if tally.work is None:
            return
        while tally.watching and not tally.finished and not self._stop_requested(tally):
            if tally.work.wait(self.poll_seconds):
                return

    def _finish(self, tally: _Tally, stopped: bool) -> WorkerSummary:
        """After the lanes: the report attempt of a run that stopped when work ran out."""
        if (
            not stopped
            and not self.until_finished
            and self.finalize_report
            and self.outage.call(
                "report check",
                lambda: self.campaigns.report_finalization_required(self.campaign_id),
            )
        ):
            self._finalize(tally)
        return WorkerSummary(
            tally.cases,
            tally.succeeded,
            tally.retrying,
            tally.failed,
            tally.report,
            tally.lost,
            stopped,
            tally.lost_reports,
        )
