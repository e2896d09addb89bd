"""Adaptive concurrency: how many of a worker's lanes may have a case in flight.

A worker started with ``concurrency=K`` treats K as a ceiling. Throttling
(the model's provider said 429) halves the lanes that may claim, never below
one (multiplicative decrease); every run of successes as long as the current
level adds one back, up to K (additive increase): the AIMD rule TCP uses, and
what clients of rate-limited model APIs do. Throttles of cases that started
before the last cut are the same burst and do not cut again.

Pure bookkeeping under a lock: the worker loop asks :meth:`LaneLimit.enter`
before each claim and calls :meth:`LaneLimit.leave` after.
"""

from __future__ import annotations

import logging
import threading

import attrs

log = logging.getLogger("benchledger.worker")


@attrs.define
class LaneLimit:
    """The lanes that may have a case in flight now (``level``), out of ``ceiling``."""

    ceiling: int
    adaptive: bool = True
    level: int = attrs.field(default=0)
    in_flight: int = 0
    successes: int = 0
    #: When the level was last cut (a worker clock's seconds): older throttles are ignored.
    cut_at: float = float("-inf")
    lock: threading.Lock = attrs.field(factory=threading.Lock, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.level = self.ceiling

    def enter(self) -> bool:
        """Take a lane for one claim; ``False`` while the level is reached."""
        with self.lock:
            if self.in_flight >= self.level:
                return False
            self.in_flight += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def throttled(self, started_at: float, now: float) -> None:
        """A case that started at ``started_at`` was throttled: halve the level, once a burst."""
        if not self.adaptive:
            return
        with self.lock:
            self.successes = 0
            if started_at < self.cut_at or self.level == 1:
                return
            self.level = max(1, self.level // 2)
            self.cut_at = now
            level = self.level
        log.info("throttled: %d of %d lanes claim now", level, self.ceiling)

    def succeeded(self) -> None:
        """A case succeeded: after ``level`` successes in a row, one more lane may claim."""
        if not self.adaptive:
            return
        with self.lock:
            if self.level >= self.ceiling:
                return
            self.successes += 1
            if self.successes < self.level:
                return
            self.successes = 0
            self.level += 1
            level = self.level
        log.info("recovering: %d of %d lanes claim now", level, self.ceiling)
