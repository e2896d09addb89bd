"""The results and compare pages' reads: the results summary's numbers and charts, and
the campaigns the compare form offers.

The results page's numbers (:func:`results_summary`) grow with the campaign:
pass rates and the score histogram need every succeeded item's result, and
the evaluator's duration percentiles a sort of the attempt history
(O(succeeded items) + O(attempts log attempts), read by the database in one
transaction, memory 8 bytes per score); the dashboard caches them and reads
them off the request path for a large campaign. The compare form's choices
(:func:`choices`) are one bounded read of the campaigns table.
:class:`~benchledger.services.campaigns.views.CampaignViews` serves both.
"""

from __future__ import annotations

import array
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_labels import Candidate, candidate_of
from benchledger.domain.results import result_passed, result_score
from benchledger.repositories.campaigns.views import CampaignViewRepository
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.services.campaigns.results import pass_score_of

#: Bars of the score histogram.
HISTOGRAM_BINS: Final = 10
#: The evaluator duration percentiles shown.
PERCENTILES: Final = (50, 95, 99)
#: At most this many buckets in the attempts-over-time chart, each a "nice" width.
TIMELINE_BUCKETS: Final = 60
_NICE_WIDTHS: Final = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    21600,
    43200,
    86400,
)
#: The attempt outcomes the failures chart stacks (every one but success and release).
FAILURE_OUTCOMES: Final = (
    AttemptOutcome.FAILED.value,
    AttemptOutcome.RETRY_SCHEDULED.value,
    AttemptOutcome.LEASE_EXPIRED.value,
)
#: Campaigns offered by the compare form.
MAX_CHOICES: Final = 200


@attrs.frozen
class LocaleResults:
    """One locale's items so far: how many, done, passed, pass rate, mean score.

    As ``load_report(provisional=True)`` counts them: the pass rate and mean score
    are over the succeeded items (a result without a score counts as not passed).
    """

    locale: str
    items: int
    succeeded: int
    failed: int
    passed: int
    scored: int
    score_sum: float

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.succeeded if self.succeeded else None

    @property
    def mean_score(self) -> float | None:
        return self.score_sum / self.succeeded if self.succeeded else None

    def as_payload(self) -> dict[str, Any]:
        return {
            "locale": self.locale,
            "items": self.items,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "passed": self.passed,
            "scored": self.scored,
            "pass_rate": self.pass_rate,
            "mean_score": self.mean_score,
        }


@attrs.frozen
class HistogramBin:
    low: float
    high: float
    count: int

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Durations:
    """The evaluator's durations of the timed attempts: nearest-rank percentiles."""

    timed: int
    percentiles: tuple[tuple[int, float], ...]  # (percentile, seconds)

    def as_payload(self) -> dict[str, Any]:
        return {"timed": self.timed, **{f"p{p}": value for p, value in self.percentiles}}


@attrs.frozen
class TimelineBucket:
    start: float
    outcomes: tuple[tuple[str, int], ...]  # (attempt outcome, attempts), every outcome

    @property
    def failures(self) -> int:
        return sum(n for outcome, n in self.outcomes if outcome in FAILURE_OUTCOMES)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.outcomes)

    def as_payload(self) -> dict[str, Any]:
        return {"start": self.start, "failures": self.failures, **dict(self.outcomes)}


@attrs.frozen
class Timeline:
    """Attempts per time bucket and outcome, from the attempt history."""

    width_seconds: float
    attempts: int
    buckets: tuple[TimelineBucket, ...]

    def as_payload(self) -> dict[str, Any]:
        return {
            "width_seconds": self.width_seconds,
            "attempts": self.attempts,
            "buckets": [bucket.as_payload() for bucket in self.buckets],
        }


@attrs.frozen
class ResultsSummary:
    """What the results page charts, as of ``at`` (how long it took: ``seconds``)."""

    campaign_id: str
    at: float
    seconds: float
    pass_score: float
    locales: tuple[LocaleResults, ...]
    histogram: tuple[HistogramBin, ...]
    durations: Durations
    timeline: Timeline | None  # None: no attempt history (legacy, or older than it)

    @property
    def overall(self) -> LocaleResults:
        return LocaleResults(
            "overall",
            *(
                sum(getattr(r, f) for r in self.locales)
                for f in ("items", "succeeded", "failed", "passed", "scored", "score_sum")
            ),
        )

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "at": self.at,
            "seconds": self.seconds,
            "pass_score": self.pass_score,
            "locales": [locale.as_payload() for locale in self.locales],
            "overall": self.overall.as_payload(),
            "histogram": [b.as_payload() for b in self.histogram],
            "durations": self.durations.as_payload(),
            "timeline": None if self.timeline is None else self.timeline.as_payload(),
        }


@attrs.frozen
class CampaignChoice:
    """A campaign the compare form offers."""

    campaign_id: str
    suite_sha256: str
    name: str | None
    candidate: Candidate
    work_count: int
    created_at: float

    @property
    def short_id(self) -> str:
        return short_id(self.campaign_id)

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "suite_sha256": self.suite_sha256,
            "name": self.name,
            "candidate": self.candidate.as_payload(),
            "work_count": self.work_count,
            "created_at": self.created_at,
        }


def _histogram(scores: Sequence[float]) -> tuple[HistogramBin, ...]:
    """Equal-width bins over [0, 1] when every score is in it, else over [min, max]."""
    if not scores:
        return ()
    low, high = min(scores), max(scores)
    if low >= 0 and high <= 1:
        low, high = 0.0, 1.0
    if high == low:
        return (HistogramBin(low, high, len(scores)),)
    width = (high - low) / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for score in scores:
        counts[min(int((score - low) / (high - low) * HISTOGRAM_BINS), HISTOGRAM_BINS - 1)] += 1
    return tuple(
        HistogramBin(low + index * width, low + (index + 1) * width, count)
        for index, count in enumerate(counts)
    )


def _bucket_width(span: float) -> float:
    for width in _NICE_WIDTHS:
        if span / width < TIMELINE_BUCKETS:
            return float(width)
    return float(math.ceil(span / TIMELINE_BUCKETS / 86400) * 86400)


def results_summary(
    db: Database,
    campaigns: CampaignService,
    campaign_id: str,
    *,
    clock: Callable[[], float] = time.time,
) -> ResultsSummary:
    """Pass rate and mean score per locale, the score histogram, the evaluator's
    duration percentiles and attempts over time, in one read transaction.

    Cost: items by (locale, status) are an index-only aggregate; pass rates
    and the histogram read every succeeded item's result (O(succeeded),
    streamed; 8 bytes per score held for the histogram); the percentiles are
    a count and one sorted stream of the timed attempts (O(attempts log
    attempts), stopped at the 99th percentile); the timeline is the
    history's span (both ends of an index) and one GROUP BY over it.
    """
    started = time.perf_counter()
    now = clock()
    status = campaigns.status(campaign_id)  # not_found first
    if status.archived_at is not None:
        raise dom.blocked(dom.ARCHIVED)  # its items were dropped: the report keeps the summary
    campaign_id = status.campaign_id
    pass_score = pass_score_of(campaigns.context)
    with db.read() as session:
        repo = CampaignViewRepository(session)
        repo.snapshot()
        per_locale: dict[str, dict[str, int]] = {}
        for locale, state, count in repo.locale_status(campaign_id):
            per_locale.setdefault(locale, {})[state] = count
        passed: dict[str, int] = {}
        scored: dict[str, int] = {}
        sums: dict[str, float] = {}
        scores = array.array("d")
        for batch in repo.succeeded_results(campaign_id):
            for locale, text in batch:
                result = json.loads(text) if text is not None else None
                if not isinstance(result, dict):
                    continue
                score = result_score(result)
                if score is not None:
                    scored[locale] = scored.get(locale, 0) + 1
                    sums[locale] = sums.get(locale, 0.0) + score
                    scores.append(score)
                if score is not None and result_passed(result, pass_score):
                    passed[locale] = passed.get(locale, 0) + 1
        timed = repo.timed_attempts(campaign_id)
        ranks = {p: max(1, math.ceil(p * timed / 100)) for p in PERCENTILES} if timed else {}
        at_rank = repo.duration_ranks(campaign_id, list(ranks.values()))
        first, last, attempts = repo.attempt_span(campaign_id)
        timeline = None
        if first is not None and last is not None:
            width = _bucket_width(max(last - first, 0.0))
            start = math.floor(first / width) * width
            counts: dict[int, dict[str, int]] = {}
            for bucket, outcome, count in repo.attempts_per_bucket(campaign_id, start, width):
                counts.setdefault(bucket, {})[outcome] = count
            buckets = int((last - start) // width) + 1
            timeline = Timeline(
                width_seconds=width,
                attempts=attempts,
                buckets=tuple(
                    TimelineBucket(
                        start + index * width,
                        tuple(
                            (o.value, counts.get(index, {}).get(o.value, 0)) for o in AttemptOutcome
                        ),
                    )
                    for index in range(buckets)
                ),
            )
    locales = tuple(
        LocaleResults(
            locale=locale,
            items=sum(states.values()),
            succeeded=states.get(WorkStatus.SUCCEEDED.value, 0),
            failed=states.get(WorkStatus.FAILED.value, 0),
            passed=passed.get(locale, 0),
            scored=scored.get(locale, 0),
            score_sum=sums.get(locale, 0.0),
        )
        for locale, states in sorted(per_locale.items())
    )
    return ResultsSummary(
        campaign_id=campaign_id,
        at=now,
        seconds=time.perf_counter() - started,
        pass_score=pass_score,
        locales=locales,
        histogram=_histogram(scores),
        durations=Durations(
            timed=timed,
            percentiles=tuple((p, at_rank[rank]) for p, rank in ranks.items() if rank in at_rank),
        ),
        timeline=timeline,
    )


def choices(db: Database, suite_sha256: str | None = None) -> tuple[CampaignChoice, ...]:
    """Up to :data:`MAX_CHOICES` campaigns newest first, of one suite when given (a
    bounded read of the campaigns table)."""
    with db.read() as session:
        rows = CampaignViewRepository(session).choices(suite_sha256, MAX_CHOICES)
    return tuple(
        CampaignChoice(
            campaign_id=row.campaign_id,
            suite_sha256=row.suite_sha256,
            name=row.name,
            candidate=candidate_of(row),
            work_count=int(row.work_count),
            created_at=float(row.created_at),
        )
        for row in rows
    )


__all__: Sequence[str] = [
    "CampaignChoice",
    "Durations",
    "HistogramBin",
    "LocaleResults",
    "ResultsSummary",
    "Timeline",
    "TimelineBucket",
    "choices",
    "results_summary",
]
