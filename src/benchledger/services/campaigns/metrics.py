"""What a Prometheus scrape reads of the campaigns: every campaign's status and its
attempt history's outcomes, at index cost.

Per campaign, :meth:`CampaignMetricsReader.read` takes ``CampaignService.status``
itself (the aggregates and seeks ``campaign status`` and the dashboard's list
read: unfinished items by status, error codes, the report state, the last
audit), and, for every campaign at once, two statements of
:mod:`benchledger.repositories.campaigns.metrics`: the leases that expired and
were not taken back yet (the leases index), and the attempts recorded since the
last scrape (a range of the history's primary key). No statement reads the
items one by one or grows with a campaign's finished items.

The history's outcomes are counters, kept by :class:`AttemptTally` as running
totals: each scrape adds the rows after the last mark. An id handed out by a
transaction that has not committed yet (PostgreSQL assigns ids before commit)
may still appear below the highest id seen, so the mark moves only up to the
highest id a scrape saw :data:`SETTLE_SECONDS` ago; the rows above it are
counted afresh each time. A reader that starts (or starts over) counts the whole
history once, settling all but its last :data:`COLD_SLACK_IDS` ids. It starts
over when a campaign disappears or is created anew (deleting a campaign deletes
its history, and SQLite may then hand out its ids again), is archived (the same,
for its history alone: its counters start again from 0, a reset to Prometheus)
or the history's top id goes down. What it cannot see: an attempt whose transaction commits more
than :data:`SETTLE_SECONDS` after a scrape saw a higher id.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign_labels import Candidate
from benchledger.domain.campaign_views import CampaignStatus, CampaignSummary
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.metrics import CampaignMetricReads
from benchledger.repositories.campaigns.reads import read_snapshot
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id

#: How long after a scrape saw an attempt id the ids below it count as committed.
SETTLE_SECONDS: Final = 60.0
#: A starting reader settles the history but for this many of its newest ids.
COLD_SLACK_IDS: Final = 10_000


def _read_only(value: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(value))


@attrs.frozen
class CampaignMetrics:
    """One campaign as a scrape reads it.

    ``status`` is ``CampaignService.status`` (``None`` when it refuses: then
    ``error`` is its code, e.g. ``policy_unregistered`` for an adopted legacy
    campaign). ``attempts`` counts the attempt history's rows by outcome;
    ``leases_expired`` the leased items whose lease ran out and that no claim
    took back yet.
    """

    campaign_id: str
    work_count: int
    created_at: float
    name: str | None
    candidate: Candidate
    status: CampaignStatus | None
    error: str | None
    leases_expired: int
    attempts: Mapping[str, int] = attrs.field(converter=_read_only, hash=False)

    @property
    def short_id(self) -> str:
        return short_id(self.campaign_id)


@attrs.frozen
class CampaignMetricsSnapshot:
    """Every campaign, oldest first, as of ``at`` (the reader's clock)."""

    at: float
    campaigns: tuple[CampaignMetrics, ...]
    #: Seconds the reads took (the reader's own cost, for the scrape's own gauge).
    read_seconds: float


class AttemptTally:
    """Running totals of the attempt history, per campaign and outcome (thread-safe).

    See the module doc for when a row is added for good and when it is
    counted again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        self._known: dict[str, object] = {}

    def _reset(self) -> None:
        self._mark = 0
        self._settled: dict[str, Counter[str]] = {}
        self._seen: deque[tuple[float, int]] = deque()  # (scrape time, highest id then)

    def totals(
        self, reads: CampaignMetricReads, now: float, campaigns: Mapping[str, object]
    ) -> dict[str, Counter[str]]:
        """Attempts per campaign and outcome, all of the history (``campaigns``: each
        listed campaign's ``created_at`` and ``archived_at``, to notice deleted,
        re-created and archived ones: each drops history rows)."""
        with self._lock:
            gone = any(campaigns.get(cid) != created for cid, created in self._known.items())
            self._known = dict(campaigns)
            top = reads.last_attempt_id()
            if gone or top < self._mark:
                self._reset()
            upto = self._settle_upto(now, top)
            fresh: dict[str, Counter[str]] = {}
            for row in reads.outcomes_after(self._mark, upto):
                into = self._settled if row.settled else fresh
                into.setdefault(row.campaign_id, Counter())[row.outcome] += row.count
            self._mark = max(self._mark, upto)
            self._seen.append((now, top))
            totals = {cid: Counter(counts) for cid, counts in self._settled.items()}
            for cid, counts in fresh.items():
                totals.setdefault(cid, Counter()).update(counts)
            return totals

    def _settle_upto(self, now: float, top: int) -> int:
        """The id up to which rows are counted for good at this scrape."""
        old = [seen for seen in self._seen if seen[0] <= now - SETTLE_SECONDS]
        if old:
            # Keep the newest settled observation and everything after it.
            while self._seen and self._seen[0] is not old[-1]:
                self._seen.popleft()
            return max(self._mark, old[-1][1])
        if self._mark == 0 and not self._seen:
            return max(0, top - COLD_SLACK_IDS)
        return self._mark


class CampaignMetricsReader:
    """Reads :class:`CampaignMetricsSnapshot` for a scrape; keep one per process (it holds
    the attempt history's running totals)."""

    def __init__(
        self, campaigns: CampaignService, *, clock: Callable[[], float] | None = None
    ) -> None:
        self.campaigns = campaigns
        self.clock = clock or campaigns.clock
        self.tally = AttemptTally()

    def _summaries(self) -> list[CampaignSummary]:
        """Every campaign, oldest first (pages of the largest listing)."""
        found: list[CampaignSummary] = []
        cursor: str | None = None
        while True:
            page = self.campaigns.list(cursor=cursor, limit=dom.MAX_LIST_LIMIT)
            found.extend(page.campaigns)
            cursor = page.next_cursor
            if cursor is None:
                return found

    def read(self) -> CampaignMetricsSnapshot:
        """Every campaign's status, expired leases and attempt outcomes, now."""
        started = time.perf_counter()
        now = self.clock()
        summaries = self._summaries()
        statuses: dict[str, CampaignStatus | str] = {}
        for summary in summaries:
            try:
                statuses[summary.campaign_id] = self.campaigns.status(summary.campaign_id)
            except CampaignBlocked as error:  # deleted meanwhile, or unreadable: say why
                statuses[summary.campaign_id] = error.code
        with read_snapshot(self.campaigns.db.engine) as connection:
            reads = CampaignMetricReads(connection)
            expired = reads.expired_leases(now)
            created = {
                summary.campaign_id: (summary.created_at, summary.archived_at)
                for summary in summaries
            }
            attempts = self.tally.totals(reads, now, created)
        campaigns = []
        for summary in summaries:
            found = statuses[summary.campaign_id]
            status = found if isinstance(found, CampaignStatus) else None
            campaigns.append(
                CampaignMetrics(
                    campaign_id=summary.campaign_id,
                    work_count=summary.work_count,
                    created_at=summary.created_at,
                    name=summary.name,
                    candidate=summary.candidate,
                    status=status,
                    error=None if status is not None else str(found),
                    leases_expired=expired.get(summary.campaign_id, 0),
                    attempts=attempts.get(summary.campaign_id, Counter()),
                )
            )
        return CampaignMetricsSnapshot(
            at=now, campaigns=tuple(campaigns), read_seconds=time.perf_counter() - started
        )
