"""How a worker holds a lease: the runtime, the background heartbeat and the lease keeper.

:class:`Runtime` says how the drivers lock, wait and renew leases in the
background (threads by default; :mod:`benchledger.aio` gives asyncio's).
:class:`LeaseKeeper` renews one lease, on demand and from the runtime's
heartbeat, and writes under it through database faults while it lives. The two
stay in one module: each names the other.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol, TypeVar

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.faults import Outage, OutagePolicy, is_transient
from benchledger.workers.options import OperationGuard

T = TypeVar("T")
Clock = Callable[[], float]
log = logging.getLogger("benchledger.worker")


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

    def start_beat(self, keeper: LeaseKeeper) -> Callable[[], None]:
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


#: The longest a heartbeat thread sleeps between looks at its keeper (see _Heartbeat).
HEARTBEAT_LOOK_SECONDS: Final = 1.0


class _Heartbeat:
    """A background thread renewing the lease of the keeper it was given, if any.

    ``start`` hands it a keeper: it renews that lease every ``keeper.next_wait()``
    seconds until ``stop``, or until a renewal fails (the keeper keeps the
    failure for its driver). ``stop`` returns once no renewal is running.

    Handing over a keeper does not wake the thread (two thread switches per case,
    on a hot path where most cases end long before their first renewal): the
    thread looks again every quarter of the shortest renewal interval it has been
    given (at most every ``HEARTBEAT_LOOK_SECONDS``), so a renewal runs at most
    that late. Only a keeper that needs looks more often than that wakes it.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._keeper: LeaseKeeper | None = None
        self._due = 0.0  # when the keeper's lease is next renewed (time.monotonic)
        self._look: float | None = None  # seconds between looks (None: no keeper yet)
        self._renewing = False
        self.thread = threading.Thread(target=self._run, name="benchledger-heartbeat", daemon=True)
        self.thread.start()

    def start(self, keeper: LeaseKeeper) -> None:
        wait = keeper.next_wait()
        look = min(HEARTBEAT_LOOK_SECONDS, wait / 4)
        with self._condition:
            self._keeper = keeper
            self._due = time.monotonic() + wait
            if self._look is None or look < self._look:
                self._look = look
                self._condition.notify_all()  # it sleeps longer than this lease allows

    def stop(self) -> None:
        with self._condition:
            self._keeper = None
            while self._renewing:
                self._condition.wait()

    def _run(self) -> None:
        condition = self._condition
        with condition:
            while True:
                keeper = self._keeper
                if keeper is None:
                    condition.wait(self._look)
                    continue
                left = self._due - time.monotonic()
                if left > 0:
                    condition.wait(min(left, self._look or left))
                    continue
                self._renewing = True
                condition.release()
                try:
                    going_on = keeper.beat()
                    wait = keeper.next_wait()
                finally:
                    condition.acquire()
                    self._renewing = False
                    condition.notify_all()
                if self._keeper is keeper:
                    if going_on:
                        self._due = time.monotonic() + wait
                    else:
                        self._keeper = None  # a failed renewal ends this lease's heartbeat


class Pulse(Protocol):
    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the next :meth:`pulse`; whether it came."""

    def wait_unless(self, ready: Callable[[], bool], timeout: float) -> bool:
        """:meth:`wait`, unless ``ready()`` says true first: a pulse sent once it said
        false is not missed (a pulser changes what ``ready`` reads, then pulses)."""

    def pulse(self) -> None:
        """Wake every lane waiting now."""


class _ThreadPulse:
    def __init__(self) -> None:
        self._condition = threading.Condition()

    def wait(self, timeout: float) -> bool:
        with self._condition:
            return self._condition.wait(timeout)

    def wait_unless(self, ready: Callable[[], bool], timeout: float) -> bool:
        with self._condition:  # a pulse takes this lock: none comes between ready and wait
            return ready() or self._condition.wait(timeout)

    def pulse(self) -> None:
        with self._condition:
            self._condition.notify_all()


THREADS: Final = Runtime()


#: The share of a lease that may be gone before the check before work writes it
#: again (see ``LeaseKeeper.renew``).
FRESH_LEASE_SHARE: Final = 0.01


class LeaseKeeper:
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

    def __enter__(self) -> LeaseKeeper:
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


def outage_of(outage: Outage | OutagePolicy | None, runtime: Runtime = THREADS) -> Outage:
    """The outage a driver rides: a running one as it is, else a new one of ``outage``'s policy.

    A new outage waits with ``runtime``'s sleep. Anything else is
    ``dependency_invalid``.
    """
    if outage is None or isinstance(outage, OutagePolicy):
        return Outage(outage, sleep=runtime.sleep)
    if isinstance(outage, Outage):
        return outage
    raise blocked(dom.DEPENDENCY_INVALID)
