"""A controllable clock for tests: epoch seconds that move only when told to.

benchledger's services and worker drivers take time as a ``Callable[[],
float]`` (epoch seconds). :class:`LedgerClock` is such a
callable whose time stands still until a test moves it, so leases, retries,
validity windows and staleness can be tested without sleeping.
"""

from __future__ import annotations

import math
import threading

#: 2026-01-01T00:00:00Z: the default start, a fixed instant so tests are repeatable.
DEFAULT_START = 1_767_225_600.0


def _seconds(value: float, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{label} must be a number of seconds, not {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{label} must be finite, not {value!r}")
    return result


class LedgerClock:
    """Epoch seconds under the test's control.

    Call it (or :meth:`now`) to read the time; :meth:`advance` moves it
    forward, :meth:`set` puts it anywhere (also backwards, to simulate clock
    skew). ``step`` seconds are added after every reading, for code that needs
    strictly increasing timestamps; it is 0 by default (time stands still).
    Thread-safe.
    """

    def __init__(self, start: float = DEFAULT_START, *, step: float = 0.0) -> None:
        self._now = self._valid_time(_seconds(start, "start"))
        step = _seconds(step, "step")
        if step < 0:
            raise ValueError("step must not be negative")
        self._step = step
        self._lock = threading.Lock()

    @staticmethod
    def _valid_time(value: float) -> float:
        if value < 0:
            raise ValueError(f"time must be epoch seconds >= 0, not {value!r}")
        return value

    def now(self) -> float:
        """The current time (then moved on by ``step``, if any)."""
        with self._lock:
            current = self._now
            self._now += self._step
            return current

    def __call__(self) -> float:
        return self.now()

    def peek(self) -> float:
        """The current time, without moving it by ``step``."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0); returns the new time."""
        seconds = _seconds(seconds, "seconds")
        if seconds < 0:
            raise ValueError("advance() moves forward only; use set() to go back")
        with self._lock:
            self._now += seconds
            return self._now

    def sleep(self, seconds: float) -> None:
        """A stand-in for :func:`time.sleep` that advances the clock instead of waiting."""
        self.advance(seconds)

    def set(self, t: float) -> float:
        """Put the clock at epoch second ``t`` (forwards or backwards); returns it."""
        value = self._valid_time(_seconds(t, "t"))
        with self._lock:
            self._now = value
            return value

    def __repr__(self) -> str:
        return f"LedgerClock({self.peek()!r}, step={self._step!r})"
