"""An idle worker's wait: a sleep, or on PostgreSQL a wait on its LISTEN connection.

A worker with nothing due waits until the next item falls due (at most its
poll interval). Reached directly on PostgreSQL, with thread lanes and the real
clock, it listens instead (``db.notify``: a campaign created, items retried, a
campaign resumed, caps raised) and wakes as soon as a notification concerns it.
The listener is opened on the first idle wait, kept for the run, and closed
with it; a broken one falls back to sleeping out the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from benchledger.db import Database
from benchledger.db.notify import WorkListener, open_listener

#: The longest a listening wait blocks before looking at ``should_stop`` again.
LISTEN_SLICE_SECONDS: Final = 0.25


class IdleWait:
    """One run's idle waits, listening when ``listens()`` says it may."""

    def __init__(
        self,
        database: Callable[[], Database],
        sleep: Callable[[float], None],
        should_stop: Callable[[], bool],
        listens: Callable[[], bool],
    ) -> None:
        self._database = database
        self._sleep = sleep
        self._should_stop = should_stop
        self._listens = listens
        self._listener: WorkListener | None = None
        self._tried = False

    def wait(self, delay: float, wakes: Callable[[set[str]], bool]) -> set[str]:
        """Wait ``delay`` seconds, or less when a notification ``wakes`` this worker; the
        campaigns notified (empty: none, or no listener and a plain sleep)."""
        listener = self._listener_now()
        if listener is None:
            self._sleep(delay)
            return set()
        deadline = time.monotonic() + delay
        while not self._should_stop():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            notified = listener.wait(min(left, LISTEN_SLICE_SECONDS))
            if listener.broken:
                self._sleep(max(0.0, deadline - time.monotonic()))
                break
            if notified and wakes(notified):
                return notified
        return set()

    def _listener_now(self) -> WorkListener | None:
        """The run's listener, opened on the first idle wait; ``None``: sleep."""
        if not self._listens():
            return None
        if self._listener is None and not self._tried:
            self._tried = True
            self._listener = open_listener(self._database())
        return self._listener

    def close(self) -> None:
        """Close the listener (the next run opens its own)."""
        if self._listener is not None:
            self._listener.close()
        self._listener, self._tried = None, False
