"""The greenlet bridge: benchledger's sync code, run on an asyncio event loop.

SQLAlchemy's asyncio extension runs sync SQLAlchemy code inside
``greenlet_spawn``: every wait on the async driver (aiosqlite, psycopg's async
mode) suspends that greenlet and yields to the event loop. benchledger's
services and worker drivers are sync code, so they run unchanged on the async
driver this way; :class:`GreenletRuntime` gives the drivers an asyncio lock,
sleep and background heartbeat in place of threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from greenlet import getcurrent  # type: ignore[import-untyped]
from sqlalchemy.util import await_only, greenlet_spawn

from benchledger.faults import Outage, OutagePolicy, riding
from benchledger.workers.lease import LeaseKeeper, Runtime

T = TypeVar("T")


async def run_sync(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await ``function(*args, **kwargs)`` (sync code) on the async driver."""
    return await greenlet_spawn(function, *args, **kwargs)


def wait(awaitable: Awaitable[T]) -> T:
    """From sync code run by :func:`run_sync`: wait for ``awaitable`` on the event loop."""
    return await_only(awaitable)


class _GreenletLock:
    """A lock for sync code in greenlets of one event loop (a thread lock would deadlock)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    def __enter__(self) -> _GreenletLock:
        await_only(self._lock.acquire())
        return self

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()


class _GreenletRLock:
    """A reentrant :class:`_GreenletLock`: the greenlet holding it may enter it again
    (as a Database's threads re-enter its RLock write gate; asyncio.Lock would
    wait for itself forever)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._owner: object = None
        self._depth = 0

    def __enter__(self) -> _GreenletRLock:
        me = getcurrent()
        if self._owner is me:
            self._depth += 1
            return self
        await_only(self._lock.acquire())
        self._owner, self._depth = me, 1
        return self

    def __exit__(self, *_exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()


class _LoopPulse:
    """Idle lanes' wake-up call, for sync code in greenlets of one event loop."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def wait(self, timeout: float) -> bool:
        event = self._event
        try:
            await_only(asyncio.wait_for(event.wait(), timeout))
        except TimeoutError:
            return False
        return True

    def wait_unless(self, ready: Callable[[], bool], timeout: float) -> bool:
        # One event loop: nothing runs between ready() and the wait.
        return ready() or self.wait(timeout)

    def pulse(self) -> None:
        self._event.set()
        self._event = asyncio.Event()


class GreenletRuntime(Runtime):
    """The drivers' waits, locks and heartbeats as asyncio's, for sync code in greenlets."""

    def lock(self) -> _GreenletLock:
        return _GreenletLock()

    def sleep(self, seconds: float) -> None:
        await_only(asyncio.sleep(seconds))

    def pulse(self) -> _LoopPulse:
        return _LoopPulse()

    def start_beat(self, keeper: LeaseKeeper) -> Callable[[], None]:
        """One heartbeat task per lease, renewing through the same keeper rules."""
        stop = asyncio.Event()

        async def beat() -> None:
            while True:
                try:
                    await asyncio.wait_for(stop.wait(), keeper.next_wait())
                    return
                except TimeoutError:
                    pass
                if not await greenlet_spawn(keeper.beat):
                    return

        task = asyncio.get_running_loop().create_task(beat(), name="benchledger-heartbeat")

        def halt() -> None:
            stop.set()
            await_only(task)

        return halt


GREENLETS = GreenletRuntime()


class _AwaitingOutage(Outage):
    """An :class:`Outage` for sync code under :func:`run_sync`: another outage's budget,
    counts and waits, its waits awaited (its ``asleep``) instead of blocking the loop."""

    def __init__(self, outage: Outage) -> None:  # no super().__init__: the state is outage's
        self._outer = outage
        self.policy = outage.policy

    @property
    def ongoing(self) -> bool:
        return self._outer.ongoing

    def succeeded(self) -> None:
        self._outer.succeeded()

    def failed(self, error: BaseException, what: str) -> None:
        await_only(self._outer.afailed(error, what))


def awaiting_outage(outage: Outage | OutagePolicy | None) -> Outage:
    """The outage sync start-up code rides under :func:`run_sync` (default: the start-up
    budget, :data:`~benchledger.faults.STARTUP_OUTAGE`); its waits are awaited."""
    given = riding(outage)
    return given if isinstance(given, _AwaitingOutage) else _AwaitingOutage(given)
