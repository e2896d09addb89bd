"""Read-only campaign views for operators (the dashboard): live numbers at index cost.

:class:`CampaignViews` answers what a page polls every few seconds — counts,
completions per minute, live leases, the retry queue, failures by code — with
SQL aggregates and bounded index reads, so it costs the same on a 100-item and
a 100,000-item campaign. It never verifies stored rows: that is
the integrity audit, ``CampaignService.verify`` (O(items), and it records its
outcome: not a read-only view's business).

The status in every view is ``CampaignService.status`` itself (the command
line's ``campaign status --json`` payload), which costs the same at any size.

The results page's numbers (:meth:`CampaignViews.results_summary`) are the
exception: they grow with the campaign, and are read by
:mod:`~benchledger.services.campaigns.result_views` (with the compare form's
choices); the dashboard caches them and reads them off the request path for a
large campaign. Its items table is ``CampaignService.results`` (a keyset page:
the same cost at any depth).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_comparison import CampaignComparison
from benchledger.domain.campaign_labels import CampaignFilter, Candidate, candidate_of
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.domain.results import ResultsPage
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.views import CampaignViewRepository
from benchledger.services.campaigns import CampaignService, result_views
from benchledger.services.campaigns.actions import CampaignControls, short_id
from benchledger.services.campaigns.result_views import (
    CampaignChoice,
    LocaleResults,
    ResultsSummary,
)

#: Minutes of history in :attr:`CampaignSnapshot.completions`.
CHART_MINUTES = 60
#: The window (seconds) the current rate and the ETA are measured over.
RATE_WINDOW_SECONDS = 300.0
#: Rows shown of the live leases and of the retry queue.
QUEUE_LIMIT = 50
#: Error codes shown with examples, and examples per code.
FAILURE_CODES_SHOWN = 20
EXAMPLES_PER_CODE = 3
#: The largest page of :meth:`CampaignViews.page` and of the results table.
MAX_PAGE = 100


@attrs.frozen
class LiveLease:
    target_locale: str
    suite_case_key: str
    worker: str
    attempt: int
    max_attempts: int
    expires_at: float
    expires_in: float

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class QueuedRetry:
    target_locale: str
    suite_case_key: str
    attempts: int
    max_attempts: int
    due_at: float
    due_in: float
    error_code: str | None

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class FailureExample:
    target_locale: str
    suite_case_key: str
    status: str
    attempts: int
    at: float

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class FailureGroup:
    """Items whose last attempt failed with one code: how many, in which state, examples."""

    code: str
    count: int
    by_status: tuple[tuple[str, int], ...]
    examples: tuple[FailureExample, ...]

    def as_payload(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "count": self.count,
            "by_status": dict(self.by_status),
            "examples": [example.as_payload() for example in self.examples],
        }


@attrs.frozen
class Progress:
    """Throughput: completions per minute over the rate window (or over the campaign's
    life while it is younger than the window), and the time left at that rate."""

    rate_per_minute: float
    eta_seconds: float | None
    last_activity_at: float
    #: The seconds the rate is measured over, and whether that is the campaign's whole life.
    window_seconds: float = RATE_WINDOW_SECONDS
    over_life: bool = False

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Completions:
    """Succeeded items per minute over the chart's hour, as of ``at``."""

    at: float
    minutes: tuple[tuple[float, int], ...]  # (minute start, succeeded in that minute)

    def recent(self) -> int:
        """Completions in the rate window (whole minutes overlapping it)."""
        return self.recent_window()[0]

    def recent_window(self) -> tuple[int, float]:
        """Completions in the whole minutes overlapping the rate window, and the seconds
        those minutes cover up to ``at`` (the window, up to a minute more)."""
        start = self.at - RATE_WINDOW_SECONDS
        counted = [(minute, count) for minute, count in self.minutes if minute + 60 > start]
        if not counted:
            return 0, RATE_WINDOW_SECONDS
        return sum(count for _, count in counted), max(self.at - counted[0][0], 1.0)


#: Where a view gets a campaign's completions: e.g. a cache of :meth:`CampaignViews.completions`.
CompletionsSource = Callable[[str, int], Completions]


@attrs.frozen
class CampaignOverview:
    """One campaign of a listing: its status (or why it has none) and its progress."""

    campaign_id: str
    work_count: int
    created_at: float
    status: CampaignStatus | None
    progress: Progress | None
    error: str | None
    name: str | None = None
    candidate: Candidate = attrs.field(factory=Candidate)

    @property
    def short_id(self) -> str:
        return short_id(self.campaign_id)

    def as_payload(self) -> dict[str, Any]:
        base: dict[str, Any] = (
            self.status.as_payload()
            if self.status is not None
            else {
                "campaign_id": self.campaign_id,
                "name": self.name,
                "candidate": self.candidate.as_payload(),
                "work_count": self.work_count,
                "created_at": self.created_at,
                "error": self.error,
            }
        )
        return {**base, "progress": None if self.progress is None else self.progress.as_payload()}


@attrs.frozen
class CampaignOverviewPage:
    campaigns: tuple[CampaignOverview, ...]
    order: str
    limit: int
    next_cursor: str | None

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaigns": [campaign.as_payload() for campaign in self.campaigns],
            "order": self.order,
            "limit": self.limit,
            "next_cursor": self.next_cursor,
        }


@attrs.frozen
class CampaignSnapshot:
    """Everything the campaign page shows that changes while workers run."""

    status: CampaignStatus
    progress: Progress
    now: float
    completions: tuple[tuple[float, int], ...]  # (minute start, succeeded in that minute)
    leases: tuple[LiveLease, ...]
    retries: tuple[QueuedRetry, ...]
    failures: tuple[FailureGroup, ...]

    def as_payload(self) -> dict[str, Any]:
        return {
            "status": self.status.as_payload(),
            "progress": self.progress.as_payload(),
            "now": self.now,
            "completions_per_minute": [
                {"minute": minute, "count": count} for minute, count in self.completions
            ],
            "leases": [lease.as_payload() for lease in self.leases],
            "retries": [retry.as_payload() for retry in self.retries],
            "failures": [group.as_payload() for group in self.failures],
        }


@attrs.frozen
class FlowControl:
    """An operator's controls of a campaign and whether they hold claims back now.

    ``capped_by`` names each cap that stops claims at this moment:
    ``max_concurrent_leases`` (as many live leases as it allows),
    ``max_claims_per_minute`` (as many claims in the last 60 s), or both;
    a cap of 0 is ``paused``.
    """

    controls: CampaignControls

    @property
    def capped_by(self) -> tuple[str, ...]:
        c = self.controls
        capped = []
        if c.max_concurrent_leases is not None and c.live_leases >= c.max_concurrent_leases:
            capped.append("max_concurrent_leases")
        if c.max_claims_per_minute is not None and c.claims_last_minute >= c.max_claims_per_minute:
            capped.append("max_claims_per_minute")
        return tuple(capped)

    @property
    def state(self) -> str:
        """``cancelled``, ``paused``, ``capped`` or ``open`` (no cap holds claims back)."""
        if self.controls.cancelled:
            return "cancelled"
        if self.controls.paused:
            return "paused"
        return "capped" if self.capped_by else "open"

    def as_payload(self) -> dict[str, Any]:
        return {
            **self.controls.as_payload(),
            "state": self.state,
            "capped_by": list(self.capped_by),
        }


def _page_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE:
        raise dom.blocked(dom.PAGE_INVALID)
    return value


class CampaignViews:
    """The dashboard's campaign reads: one read transaction each, nothing written."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        campaigns: CampaignService | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.campaigns = campaigns if campaigns is not None else CampaignService(db, clock=clock)

    def page(
        self,
        *,
        cursor: str | None = None,
        limit: int = 20,
        newest_first: bool = False,
        completions: CompletionsSource | None = None,
        where: CampaignFilter | None = None,
    ) -> CampaignOverviewPage:
        """Campaigns in creation order (or newest first), each with status and progress.

        ``completions`` gives each campaign's recent completions (default: read
        now, :meth:`completions`); the dashboard passes its cache. ``where``
        keeps only some (as ``CampaignService.list``: provider, model, suite
        prefix, part of the name).
        """
        limit = _page_limit(limit)
        if cursor is not None and not dom.is_campaign_id(cursor):
            raise dom.blocked(dom.PAGE_INVALID)
        source = completions or (lambda campaign_id, _items: self.completions(campaign_id))
        with self.db.read() as session:
            rows = CampaignViewRepository(session).page(
                cursor, limit + 1, newest_first=newest_first, where=where
            )
        if rows is None:
            raise dom.blocked(dom.PAGE_INVALID)
        shown = rows[:limit]
        overviews = []
        for row in shown:
            try:
                status = self.campaigns.status(row.campaign_id)
            except CampaignBlocked as error:
                overviews.append(
                    CampaignOverview(
                        campaign_id=row.campaign_id,
                        work_count=int(row.work_count),
                        created_at=float(row.created_at),
                        status=None,
                        progress=None,
                        error=error.code,
                        name=row.name,
                        candidate=candidate_of(row),
                    )
                )
                continue
            overviews.append(
                CampaignOverview(
                    campaign_id=row.campaign_id,
                    work_count=status.work_count,
                    created_at=status.created_at,
                    status=status,
                    progress=_progress(status, source(status.campaign_id, status.work_count)),
                    error=None,
                    name=status.name,
                    candidate=status.candidate,
                )
            )
        return CampaignOverviewPage(
            campaigns=tuple(overviews),
            order=dom.ListOrder.NEWEST if newest_first else dom.ListOrder.OLDEST,
            limit=limit,
            next_cursor=shown[-1].campaign_id if len(rows) > limit else None,
        )

    def status(self, campaign_id: str) -> CampaignStatus:
        """``CampaignService.status`` (``not_found``, ...)."""
        return self.campaigns.status(campaign_id)

    def resolve(self, campaign_id: str) -> str:
        """The campaign a whole id or a unique prefix (>= 4 hex digits, as the command
        line's 12-digit short ids) names: ``CampaignService.resolve`` (one index seek)."""
        if dom.is_campaign_id(campaign_id):
            return campaign_id
        return self.campaigns.resolve(campaign_id)

    def flow(self, campaign_id: str) -> FlowControl:
        """Cancelled, paused, or capped and by what (``CampaignService.controls``: the
        campaign row by key, live leases and the last minute's claims by index)."""
        return FlowControl(self.campaigns.controls(campaign_id))

    def results(
        self,
        campaign_id: str,
        *,
        status: str | None = None,
        locale: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> ResultsPage:
        """A page of the items table: ``CampaignService.results`` (a keyset page, the same
        cost at any depth), at most :data:`MAX_PAGE` items."""
        return self.campaigns.results(
            campaign_id, status=status, locale=locale, cursor=cursor, limit=_page_limit(limit)
        )

    def results_summary(self, campaign_id: str) -> ResultsSummary:
        """Pass rate and mean score per locale, the score histogram, the evaluator's
        duration percentiles and attempts over time, in one read transaction.

        Cost: items by (locale, status) are an index-only aggregate; pass rates
        and the histogram read every succeeded item's result (O(succeeded),
        streamed; 8 bytes per score held for the histogram); the percentiles are
        a count and one sorted stream of the timed attempts (O(attempts log
        attempts), stopped at the 99th percentile); the timeline is the
        history's span (both ends of an index) and one GROUP BY over it.
        """
        return result_views.results_summary(self.db, self.campaigns, campaign_id, clock=self.clock)

    def choices(self, suite_sha256: str | None = None) -> tuple[CampaignChoice, ...]:
        """Up to :data:`MAX_CHOICES` campaigns newest first, of one suite when given (a
        bounded read of the campaigns table)."""
        return result_views.choices(self.db, suite_sha256)

    def compare(
        self, campaign_a: str, campaign_b: str, *, seed: int, resamples: int
    ) -> CampaignComparison:
        """``CampaignService.compare``: both campaigns' items streamed and paired
        (O(items of both)), then the bootstrap's ``resamples`` x pairs draws."""
        return self.campaigns.compare(campaign_a, campaign_b, seed=seed, resamples=resamples)

    def completions(self, campaign_id: str) -> Completions:
        """Succeeded items per minute over the last hour (one aggregate).

        It reads the campaign's succeeded items (through the ready index's
        status range), so it grows with them: a dashboard caches it for large
        campaigns and refreshes it off the request path.
        """
        now = self.clock()
        first_minute = (math.floor(now / 60) - CHART_MINUTES + 1) * 60
        with self.db.read() as session:
            per_minute = CampaignViewRepository(session).completions_per_minute(
                campaign_id, first_minute
            )
        minutes = [first_minute + 60 * index for index in range(CHART_MINUTES)]
        return Completions(
            at=now, minutes=tuple((float(m), per_minute.get(int(m // 60), 0)) for m in minutes)
        )

    def snapshot(
        self, campaign_id: str, *, completions: CompletionsSource | None = None
    ) -> CampaignSnapshot:
        """Status, completions per minute, rate and ETA, leases, retries, failures by code.

        ``completions`` as in :meth:`page`.
        """
        now = self.clock()
        status = self.campaigns.status(campaign_id)
        chart = (
            completions(status.campaign_id, status.work_count)
            if completions is not None
            else self.completions(status.campaign_id)
        )
        with self.db.read() as session:
            repo = CampaignViewRepository(session)
            repo.snapshot()
            leases = repo.leases(status.campaign_id, QUEUE_LIMIT)
            retries = repo.retries(status.campaign_id, QUEUE_LIMIT)
            failures = self._failures(repo, status.campaign_id)
        return CampaignSnapshot(
            status=status,
            progress=_progress(status, chart),
            now=now,
            completions=chart.minutes,
            leases=tuple(
                LiveLease(
                    target_locale=row.target_locale,
                    suite_case_key=row.suite_case_key,
                    worker=row.lease_owner or "",
                    attempt=int(row.attempts),
                    max_attempts=int(row.max_attempts),
                    expires_at=float(row.lease_expires_at),
                    expires_in=float(row.lease_expires_at) - now,
                )
                for row in leases
            ),
            retries=tuple(
                QueuedRetry(
                    target_locale=row.target_locale,
                    suite_case_key=row.suite_case_key,
                    attempts=int(row.attempts),
                    max_attempts=int(row.max_attempts),
                    due_at=float(row.next_attempt_at),
                    due_in=float(row.next_attempt_at) - now,
                    error_code=row.last_error_code,
                )
                for row in retries
            ),
            failures=failures,
        )

    # -- internals ----------------------------------------------------------------------

    @staticmethod
    def _failures(repo: CampaignViewRepository, campaign_id: str) -> tuple[FailureGroup, ...]:
        by_code: dict[str, dict[str, int]] = {}
        for code, status, count in repo.errors(campaign_id):
            by_code.setdefault(code, {})[status] = count
        ranked = sorted(by_code.items(), key=lambda item: (-sum(item[1].values()), item[0]))
        groups = []
        for index, (code, statuses) in enumerate(ranked):
            rows = (
                repo.failure_examples(campaign_id, code, EXAMPLES_PER_CODE)
                if index < FAILURE_CODES_SHOWN
                else ()
            )
            groups.append(
                FailureGroup(
                    code=code,
                    count=sum(statuses.values()),
                    by_status=tuple(sorted(statuses.items())),
                    examples=tuple(
                        FailureExample(
                            target_locale=row.target_locale,
                            suite_case_key=row.suite_case_key,
                            status=row.status,
                            attempts=int(row.attempts),
                            at=float(row.updated_at),
                        )
                        for row in rows
                    ),
                )
            )
        return tuple(groups)


def _progress(status: CampaignStatus, chart: Completions) -> Progress:
    """The rate over the window; over the campaign's life while it is younger than that
    (its succeeded items over its age: a 22-second campaign that did 500 items ran at
    about 1,364 per minute, not 500 per five minutes)."""
    counts = status.counts
    age = chart.at - status.created_at
    if age < RATE_WINDOW_SECONDS:
        done, seconds, over_life = counts[WorkStatus.SUCCEEDED], max(age, 1.0), True
    else:
        (done, seconds), over_life = chart.recent_window(), False
    rate = done * 60.0 / seconds
    left = status.work_count - counts[WorkStatus.SUCCEEDED] - counts[WorkStatus.FAILED]
    eta = None if left <= 0 or rate <= 0 else left / rate * 60.0
    return Progress(
        rate_per_minute=rate,
        eta_seconds=eta,
        last_activity_at=status.updated_at,
        window_seconds=seconds,
        over_life=over_life,
    )


__all__: Sequence[str] = [
    "CampaignChoice",
    "CampaignOverview",
    "CampaignOverviewPage",
    "CampaignSnapshot",
    "CampaignViews",
    "Completions",
    "CompletionsSource",
    "FailureExample",
    "FailureGroup",
    "FlowControl",
    "LiveLease",
    "LocaleResults",
    "Progress",
    "QueuedRetry",
    "ResultsSummary",
]
