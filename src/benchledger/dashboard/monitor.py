"""The full checks a page must not wait for: health (every row verified) and the report.

``CampaignService.health`` verifies every stored row and result, and
``load_report`` re-verifies the report against every result: both read the
whole campaign. The dashboard runs them off the request path, one at a time,
and serves the last finished result with when it was taken and how long it
took. A small campaign (at most ``inline_items`` items) is checked inline
instead, so its page is never "checking". A finalized report is immutable, so
once verified it is kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs

from benchledger.domain.campaign import CampaignHealth
from benchledger.errors import LedgerError
from benchledger.services.campaigns import CampaignService


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
    """Health checks and report verifications, cached and run in one background thread."""

    def __init__(
        self,
        campaigns: CampaignService,
        *,
        refresh_seconds: float = 10.0,
        inline_items: int = 2_000,
        stale_after_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.campaigns = campaigns
        self.refresh_seconds = refresh_seconds
        self.inline_items = inline_items
        self.stale_after_seconds = stale_after_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._health: dict[str, HealthCheck] = {}
        self._reports: dict[str, ReportCheck] = {}
        self._running: dict[tuple[str, str], Future[None]] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-check")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

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
        self._submit("health", campaign_id, lambda: self._check_health(campaign_id))
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
        self._submit("report", campaign_id, lambda: self._check_report(campaign_id))
        return cached

    def _check_report(self, campaign_id: str) -> None:
        try:
            check = ReportCheck(self.campaigns.load_report(campaign_id), None, self.clock())
        except LedgerError as error:
            check = ReportCheck(None, error.code, self.clock())
        with self._lock:
            self._reports[campaign_id] = check

    # -- the background thread ----------------------------------------------------------

    def _submit(self, kind: str, campaign_id: str, job: Callable[[], None]) -> None:
        key = (kind, campaign_id)
        with self._lock:
            running = self._running.get(key)
            if running is not None and not running.done():
                return
            future = self._executor.submit(self._guarded, job)
            self._running[key] = future

    @staticmethod
    def _guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:  # a database outage: the next request starts another check
            return
