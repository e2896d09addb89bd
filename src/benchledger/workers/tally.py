"""A worker run's shared state and what it reports: :class:`Tally`,
:class:`WorkerProgress` and :class:`WorkerSummary` (re-exported by
:mod:`benchledger.workers.loop`, whose :class:`~benchledger.workers.loop.Worker`
keeps one tally per run and its lanes share it).
"""

from __future__ import annotations

import threading

import attrs

from benchledger.domain.campaign_results import CaseOutcome, ReportOutcome
from benchledger.workers.batching import ClaimBuffer, Committer
from benchledger.workers.drivers import DriverContext
from benchledger.workers.lanes import LaneLimit
from benchledger.workers.lease import Pulse
from benchledger.workers.options import MAX_CONCURRENCY


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
    throttled: int = 0  # cases handed back throttled (no attempt spent)
    lanes: int = 1  # lanes that may claim now (adaptive concurrency: at most concurrency)


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
    throttled: int = 0  # cases handed back throttled: due again later, no attempt spent


@attrs.define
class Tally:
    """One run's counts, shared by its lanes (one per case in flight)."""

    cases: int = 0
    succeeded: int = 0
    retrying: int = 0
    failed: int = 0
    lost: int = 0
    lost_reports: int = 0
    throttled: int = 0
    report: ReportOutcome | None = None
    started: int = 0  # claims tried or in flight, against max_cases
    # Lanes that may claim (adaptive concurrency); by default never a limit.
    lanes: LaneLimit = attrs.field(factory=lambda: LaneLimit(MAX_CONCURRENCY, adaptive=False))
    # The lanes' shared claims and commits (several lanes, batching on; else None).
    buffer: ClaimBuffer | None = None
    committer: Committer | None = None
    drained: bool = False  # a lane ended (nothing due, max_cases, finished): held-back ones too
    stop: bool = False  # a lane ended on an error: the others claim nothing more
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    # Idle lanes (nothing due): one watches the campaign's status, the others wait
    # for its word (a pulse) instead of all polling the database.
    work: Pulse | None = None
    watching: bool = False
    finished: bool = False
    # What the run's attempts share (its buffer and committer with them): made once.
    driving: DriverContext | None = None

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
            self.throttled,
            self.lanes.level,
        )
