"""What a page must not wait for on a large campaign, read off the request path.

- ``CampaignService.load_report`` returns a report only after the whole
  campaign verifies (it reads every item): fetched in an "audits" thread; a
  finalized report is immutable, so once verified it is kept;
- the completions chart reads every succeeded item: refreshed every
  ``completions_refresh_seconds`` in a "numbers" thread;
- health (cheap, but polled by every open page) is re-read at most every
  ``refresh_seconds``, in the "numbers" thread too;
- the results page's summary (pass rates, score histogram, duration
  percentiles, attempts over time: it reads every succeeded item's result) is
  re-read at most every ``refresh_seconds`` in the "numbers" thread; a large
  campaign's first read is queued too, and its page says the numbers are
  being read meanwhile.

Each is served from the last finished read, with when it was taken. A small
campaign (at most ``inline_items`` items), or the first read of a large one's
numbers, is read inline instead, so a page never lacks its numbers. Nothing
here writes: the integrity audit, which records its outcome, is not run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs

from benchledger.domain.campaign_views import CampaignHealth
from benchledger.errors import LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.result_views import ResultsSummary
from benchledger.services.campaigns.views import CampaignViews, Completions


@attrs.frozen
class HealthCheck:
    """One finished health check."""

    health: CampaignHealth
    checked_at: float
    seconds: float

    def as_payload(self) -> dict[str, Any]:
        return {**self.health.as_payload(), "checked_at": self.checked_at, "seconds": self.seconds}


@attrs.frozen
class ReportCheck:
    """A verified report, or the code that refused it."""

    report: dict[str, Any] | None
    error: str | None
    checked_at: float


class Monitor:
    """Health, completions and verified reports, cached and refreshed in two threads."""

    def __init__(
        self,
        campaigns: CampaignService,
        views: CampaignViews,
        *,
        refresh_seconds: float = 10.0,
        completions_refresh_seconds: float = 3.0,
        inline_items: int = 2_000,
        stale_after_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.campaigns = campaigns
        self.views = views
        self.refresh_seconds = refresh_seconds
        self.completions_refresh_seconds = completions_refresh_seconds
        self.inline_items = inline_items
        self.stale_after_seconds = stale_after_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._health: dict[str, HealthCheck] = {}
        self._reports: dict[str, ReportCheck] = {}
        self._completions: dict[str, Completions] = {}
        self._results: dict[str, tuple[ResultsSummary, Hashable]] = {}
        self._running: dict[tuple[str, str], Future[None]] = {}
        self._executors = {
            "numbers": ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-numbers"),
            "audits": ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-audits"),
        }

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)

    # -- completions per minute ---------------------------------------------------------

    def completions(self, campaign_id: str, work_count: int) -> Completions:
        """The latest completions chart; refreshed in the background for a large campaign."""
        with self._lock:
            cached = self._completions.get(campaign_id)
        if cached is not None and self.clock() - cached.at < self.completions_refresh_seconds:
            return cached
        if cached is None or work_count <= self.inline_items:
            self._read_completions(campaign_id)
            with self._lock:
                return self._completions[campaign_id]
        self._submit("numbers", campaign_id, lambda: self._read_completions(campaign_id))
        return cached

    def _read_completions(self, campaign_id: str) -> None:
        chart = self.views.completions(campaign_id)
        with self._lock:
            self._completions[campaign_id] = chart

    # -- the results page's summary -------------------------------------------------------

    def results(
        self, campaign_id: str, work_count: int, fingerprint: Hashable = None
    ) -> ResultsSummary | None:
        """The latest results summary (``None`` while a large campaign's first is read).

        Kept while ``fingerprint`` (the campaign's counts and last update) has not
        changed: a finished campaign's numbers are read once.
        """
        with self._lock:
            cached = self._results.get(campaign_id)
        if cached is not None and (
            (fingerprint is not None and cached[1] == fingerprint)
            or self.clock() - cached[0].at < self.refresh_seconds
        ):
            return cached[0]
        if work_count <= self.inline_items:
            self._read_results(campaign_id, fingerprint)
            with self._lock:
                return self._results[campaign_id][0]
        self._submit(
            "numbers",
            campaign_id,
            lambda: self._read_results(campaign_id, fingerprint),
            "results",
        )
        return None if cached is None else cached[0]

    def _read_results(self, campaign_id: str, fingerprint: Hashable) -> None:
        summary = self.views.results_summary(campaign_id)
        with self._lock:
            self._results[campaign_id] = (summary, fingerprint)

    # -- health -------------------------------------------------------------------------

    def health(self, campaign_id: str, work_count: int) -> HealthCheck | None:
        """The latest health check; a new one is started when it is older than the refresh."""
        with self._lock:
            cached = self._health.get(campaign_id)
        if cached is not None and self.clock() - cached.checked_at < self.refresh_seconds:
            return cached
        if work_count <= self.inline_items:
            self._check_health(campaign_id)
            with self._lock:
                return self._health.get(campaign_id)
        self._submit("numbers", campaign_id, lambda: self._check_health(campaign_id), "health")
        return cached

    def _check_health(self, campaign_id: str) -> None:
        started = time.perf_counter()
        health = self.campaigns.health(campaign_id, stale_after_seconds=self.stale_after_seconds)
        check = HealthCheck(health, self.clock(), time.perf_counter() - started)
        with self._lock:
            self._health[campaign_id] = check

    # -- report -------------------------------------------------------------------------

    def report(self, campaign_id: str, work_count: int) -> ReportCheck | None:
        """The verified finalized report (kept once verified), or ``None`` while checking."""
        with self._lock:
            cached = self._reports.get(campaign_id)
        if cached is not None and (
            cached.report is not None or self.clock() - cached.checked_at < self.refresh_seconds
        ):
            return cached
        if work_count <= self.inline_items:
            self._check_report(campaign_id)
            with self._lock:
                return self._reports.get(campaign_id)
        self._submit("audits", campaign_id, lambda: self._check_report(campaign_id), "report")
        return cached

    def _check_report(self, campaign_id: str) -> None:
        try:
            check = ReportCheck(self.campaigns.load_report(campaign_id), None, self.clock())
        except LedgerError as error:
            check = ReportCheck(None, error.code, self.clock())
        with self._lock:
            self._reports[campaign_id] = check

    # -- the background threads ---------------------------------------------------------

    def _submit(
        self, thread: str, campaign_id: str, job: Callable[[], None], kind: str = ""
    ) -> None:
        """Queue ``job`` unless the same kind of read of this campaign is queued already."""
        key = (kind or thread, campaign_id)
        with self._lock:
            running = self._running.get(key)
            if running is not None and not running.done():
                return
            self._running[key] = self._executors[thread].submit(self._guarded, job)

    @staticmethod
    def _guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:  # a database outage: the next request starts another check
            return
