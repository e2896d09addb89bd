"""A worker's lanes share their claims and their commits: fewer statements, fewer fsyncs.

- :class:`ClaimBuffer`: a lane that needs a case takes one from the buffer; when
  it is empty, one batched claim (``CampaignService.claim_batch``) leases as many
  items as lanes are free (at most ``max_batch``) and the others wait their turn
  on the buffer's lock, then take theirs. A buffered item is run under the same
  check before work as any claim (the lease keeper renews an aging lease, or
  raises ``lease_lost`` for a dead one): it is never run on a dead lease. Once
  the worker stops, the buffer claims nothing more, and the lanes run what it
  holds (held cases are finished, as on Ctrl-C).
- :class:`Committer`: the lanes' completions are written many per transaction
  (``CampaignService.complete_batch``). The first lane to complete leads: it
  writes every completion waiting, then those that arrived meanwhile, until
  none is left; the others wait for its word. ``complete`` returns only after
  its own row committed, and a stale lease in the batch is that lane's
  ``lease_lost`` alone. While other lanes still evaluate, the leader first waits
  a moment (``LINGER_SECONDS``) for their results to join; only the result that
  ends the wait (the last one due, or the one that fills the batch) wakes it,
  and with nothing left to write it hands the lead on at once. On SQLite this
  is one fsync for many items; on PostgreSQL one statement.

Both run on the worker's runtime (threads, or asyncio lanes through greenlets):
its lock and its pulse are the only ways they wait.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from benchledger.domain.campaign_results import CaseOutcome, ClaimedCase, Completion
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.workers.lanes import LaneLimit
from benchledger.workers.lease import Runtime

#: The most items one batched claim of a worker leases.
MAX_CLAIM_BATCH: Final = 32
#: The most completions one group commit writes.
MAX_COMMIT_BATCH: Final = 256
#: How long a waiting lane sleeps between looks when no word came (a safety net).
WAIT_SECONDS: Final = 0.05
#: How long a group commit waits for the lanes still evaluating, at most.
LINGER_SECONDS: Final = 0.002


class ClaimBuffer:
    """One campaign's claims, leased in batches and taken one by one by the lanes."""

    def __init__(
        self,
        campaigns: CampaignService,
        campaign_id: str,
        worker_id: str,
        lease_seconds: float,
        lanes: LaneLimit,
        runtime: Runtime,
        max_batch: int = MAX_CLAIM_BATCH,
    ) -> None:
        self.campaigns = campaigns
        self.campaign_id = campaign_id
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.lanes = lanes
        self.max_batch = max_batch
        self._items: deque[ClaimedCase] = deque()
        self._lock = runtime.lock()  # one claim of the process at a time
        self._count = threading.Lock()  # the counters (never held across a wait)
        self.busy = 0  # lanes evaluating a case taken from here
        self.closed = False  # stopping: take only what is held
        #: How many more cases the run may claim besides the caller's (max_cases), if bounded.
        self.room: Callable[[], int] | None = None
        #: Whether the worker was asked to stop (no case is leased for later then).
        self.stopping: Callable[[], bool] = lambda: False

    def held(self) -> int:
        """Items leased and not yet taken by a lane."""
        return len(self._items)

    def pending_results(self) -> int:
        """Cases taken from here and still evaluating, or leased and not yet taken: the
        results this worker's lanes will write next."""
        return self.busy + len(self._items)

    def take(self, now: float) -> ClaimedCase | None:
        """The next buffered case, or a batch claimed now (``None``: nothing due)."""
        with self._lock:
            if not self._items and not self.closed:
                with self._count:
                    free = self.lanes.level - self.busy
                n = max(1, min(self.max_batch, free))
                if self.room is not None:
                    n = max(1, min(n, 1 + self.room()))
                self._items.extend(
                    self.campaigns.claim_batch(
                        self.campaign_id,
                        self.worker_id,
                        n,
                        now=now,
                        lease_seconds=self.lease_seconds,
                    )
                )
            if not self._items:
                return None
            claim = self._items.popleft()
        with self._count:
            self.busy += 1
        return claim

    def refill_size(self, freed: int) -> int:
        """How many cases to lease with a group commit that frees ``freed`` lanes: one for
        each not already held for, and no more than lanes may claim now (adaptive
        concurrency may have cut them); 0 once stopping, or when the run's cases are
        capped (see :attr:`room`)."""
        if self.closed or self.room is not None or self.stopping():
            return 0
        return max(0, min(self.max_batch, freed, self.lanes.level) - len(self._items))

    def refill(self, claims: list[ClaimedCase]) -> None:
        """Hold cases leased with a group commit, for the lanes it freed."""
        self._items.extend(claims)

    def done(self) -> None:
        """A lane is done evaluating the case it took from here (its result may still be
        on its way: the lane will want a case by the time it is written)."""
        with self._count:
            self.busy -= 1


@attrs.define
class _Entry:
    completion: Completion
    now: float
    outcome: CaseOutcome | None = None
    error: BaseException | None = None
    done: bool = False


class Committer:
    """Writes the lanes' completions many per transaction (leader and followers)."""

    def __init__(
        self,
        campaigns: CampaignService,
        runtime: Runtime,
        max_batch: int = MAX_COMMIT_BATCH,
        evaluating: Callable[[], int] | None = None,
        linger: float = LINGER_SECONDS,
    ) -> None:
        self.campaigns = campaigns
        self.max_batch = max_batch
        #: How many cases the lanes still evaluate or are about to (their results may
        #: be moments away): the leader waits up to ``linger`` seconds for them. None:
        #: it never waits.
        self.evaluating = evaluating
        self.linger = linger
        #: The lanes' claim buffer, when each group commit also leases the next cases
        #: of the lanes it frees (``CampaignService.complete_and_claim``: one commit).
        self.refills: ClaimBuffer | None = None
        self._lock = threading.Lock()  # the queue (never held across a write or a wait)
        self._pending: list[_Entry] = []
        self._flushing = False
        self._word = runtime.pulse()
        self._arrived = runtime.pulse()  # a completion joined the queue
        self._clock = time.monotonic
        self.batches = 0  # transactions written (what the tests and benchmarks count)

    def complete(
        self,
        claim: ClaimedCase,
        result: Mapping[str, Any],
        now: float,
        duration_seconds: float | None = None,
        cost_units: int = 0,
    ) -> CaseOutcome:
        """``CampaignService.complete`` of one case, written with the others waiting; returns
        after its commit, or raises its own refusal (``lease_lost``, ``result_invalid``...)
        or the transaction's fault (which the caller's lease keeper rides out)."""
        entry = _Entry(Completion(claim, result, duration_seconds, cost_units), now)
        with self._lock:
            self._pending.append(entry)
            lead = not self._flushing
            self._flushing = True
        if lead:
            self._lead()
        elif self._linger_over():
            self._arrived.pulse()
        while not entry.done:
            self._word.wait(WAIT_SECONDS)
        if entry.error is not None:
            raise entry.error
        assert entry.outcome is not None
        return entry.outcome

    def _lead(self) -> None:
        """Write batches until no completion waits; then hand the lead back (also when
        interrupted: what still waits is told, never left waiting)."""
        try:
            while True:
                self._linger()
                with self._lock:
                    batch = self._pending[: self.max_batch]
                    del self._pending[: self.max_batch]
                    if not batch:
                        self._flushing = False
                        return
                self._write(batch)
                self._word.pulse()
        except BaseException as error:
            with self._lock:
                left, self._pending, self._flushing = self._pending, [], False
            for entry in left:
                entry.error, entry.done = error, True
            self._word.pulse()
            raise

    def _linger(self) -> None:
        """Wait (``linger`` seconds at most) while lanes still evaluate and the batch has
        room: cases that end together share one commit, not a commit of one and then
        one of the rest. No lane evaluating: no wait."""
        if self.evaluating is None or self.linger <= 0:
            return
        deadline = self._clock() + self.linger
        while not self._linger_over():
            left = deadline - self._clock()
            if left <= 0:
                return
            self._arrived.wait_unless(self._linger_over, left)

    def _linger_over(self) -> bool:
        """Whether the leader waits for no more results: none waits to be written (the
        lead passes to the next one: the leader's own lane goes back to work), the batch
        is full, or no lane evaluates (nor is about to). Only the completion that makes
        this true wakes it: one wake-up per round, not one per lane (each a thread
        switch of the leader's)."""
        with self._lock:
            waiting = len(self._pending)
        if waiting == 0 or waiting >= self.max_batch:
            return True
        return self.evaluating is None or self.evaluating() == 0

    def _write(self, batch: list[_Entry]) -> None:
        now = max(entry.now for entry in batch)
        completions = [entry.completion for entry in batch]
        buffer = self.refills
        wanted = 0 if buffer is None else buffer.refill_size(len(batch))
        try:
            if buffer is not None and wanted:
                outcomes, claims = self.campaigns.complete_and_claim(
                    completions,
                    buffer.campaign_id,
                    buffer.worker_id,
                    wanted,
                    now=now,
                    lease_seconds=buffer.lease_seconds,
                )
                buffer.refill(claims)
            else:
                outcomes = self.campaigns.complete_batch(completions, now=now)
        except BaseException as error:  # the transaction: every entry meets its fault
            for entry in batch:
                entry.error, entry.done = error, True
            if not isinstance(error, Exception):
                raise
            return
        self.batches += 1
        for entry, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, CampaignBlocked):
                entry.error = outcome
            else:
                entry.outcome = outcome
            entry.done = True
