"""``GET /metrics``: the ledger in Prometheus' text exposition format.

Each scrape reads :class:`~benchledger.services.campaigns.metrics.CampaignMetricsSnapshot`
(every campaign's ``status`` and attempt history, at index cost) and the
studies' budget bars (:class:`~benchledger.services.studies.views.StudyViews`, as
the study list shows them), then writes them through a collector of its own on
a registry of its own (nothing is kept between scrapes but the attempt
history's running totals, in the reader). It sits behind the dashboard's token
gate like every other route: Prometheus sends ``Authorization: Bearer``.

Every series of a campaign carries the labels ``campaign`` (the short id the
command line and the dashboard show), ``name`` and ``candidate`` (``provider /
model @ version``); a study's carry ``study`` and ``name``. What each series
means is in :data:`CAMPAIGN_SERIES` and :data:`STUDY_SERIES` (and
docs/operations.md, "Metrics"): a new series of a campaign is one more
:class:`CampaignSeries` there, read from the campaign's status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Literal

import attrs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from benchledger.dashboard.pages import Pages
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign import REPORT_STATUSES, STATUSES, WorkStatus
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.domain.limit_groups import LimitGroupUsage
from benchledger.domain.study import StudyState
from benchledger.errors import LedgerError
from benchledger.services.campaigns.metrics import (
    CampaignMetrics,
    CampaignMetricsReader,
    CampaignMetricsSnapshot,
)
from benchledger.services.studies.views import MAX_PAGE, StudyOverview, StudyViews

#: The labels of every campaign series, and of every study series.
CAMPAIGN_LABELS: Final = ("campaign", "name", "candidate")
STUDY_LABELS: Final = ("study", "name")

#: A series' samples: the values of its extra label (if any) and the sample's value.
Samples = Iterable[tuple[tuple[str, ...], float]]


@attrs.frozen
class CampaignSeries:
    """One metric family over every campaign: ``values`` gives a campaign's samples
    (``now`` is the scrape's time); ``label`` names the extra label, if any."""

    name: str  # a counter's name without ``_total`` (the exposition adds it)
    kind: Literal["gauge", "counter"]
    documentation: str
    values: Callable[[CampaignMetrics, float], Samples]
    label: str | None = None


@attrs.frozen
class StudySeries:
    """One metric family over every study (as :class:`CampaignSeries`)."""

    name: str
    documentation: str
    values: Callable[[StudyOverview], Samples]
    label: str | None = None


def _one(value: float) -> Samples:
    return (((), float(value)),)


def _flag(value: bool) -> Samples:
    return _one(1.0 if value else 0.0)


def _given(value: float | None) -> Samples:
    return () if value is None else _one(value)


def _of_status(
    read: Callable[[CampaignStatus, float], Samples],
) -> Callable[[CampaignMetrics, float], Samples]:
    """Samples read from the campaign's status; none when its status is refused."""

    def values(campaign: CampaignMetrics, now: float) -> Samples:
        return () if campaign.status is None else read(campaign.status, now)

    return values


def _items(status: CampaignStatus, now: float) -> Samples:
    return (((name,), float(status.counts[name])) for name in STATUSES)


def _item_errors(status: CampaignStatus, now: float) -> Samples:
    return (((code,), float(count)) for code, count in sorted(status.error_counts.items()))


def _report_state(status: CampaignStatus, now: float) -> Samples:
    state = status.report_finalization["status"]
    return (((name,), 1.0 if name == state else 0.0) for name in REPORT_STATUSES)


def _attempts(*outcomes: AttemptOutcome) -> Callable[[CampaignMetrics, float], Samples]:
    def values(campaign: CampaignMetrics, now: float) -> Samples:
        return _one(sum(campaign.attempts.get(outcome, 0) for outcome in outcomes))

    return values


def _attempts_by_outcome(campaign: CampaignMetrics, now: float) -> Samples:
    names = [*AttemptOutcome, *sorted(set(campaign.attempts) - set(AttemptOutcome))]
    return (((str(name),), float(campaign.attempts.get(name, 0))) for name in names)


def _verify_age(status: CampaignStatus, now: float) -> Samples:
    return () if status.verified_at is None else _one(max(0.0, now - status.verified_at))


def _verify_ok(status: CampaignStatus, now: float) -> Samples:
    return () if status.verified_ok is None else _flag(status.verified_ok)


def _verify_current(status: CampaignStatus, now: float) -> Samples:
    return () if status.verified_current is None else _flag(status.verified_current)


def _status_error(campaign: CampaignMetrics, now: float) -> Samples:
    return () if campaign.error is None else (((campaign.error,), 1.0),)


#: Every campaign's series, in the order they are written (docs/operations.md, "Metrics").
CAMPAIGN_SERIES: Final[tuple[CampaignSeries, ...]] = (
    CampaignSeries(
        "benchledger_campaign_work_items",
        "gauge",
        "Work items in the campaign (locales x cases).",
        lambda campaign, now: _one(campaign.work_count),
    ),
    CampaignSeries(
        "benchledger_campaign_items",
        "gauge",
        "Work items by status (pending, leased, retry_wait, succeeded, failed).",
        _of_status(_items),
        label="status",
    ),
    CampaignSeries(
        "benchledger_campaign_items_throttled",
        "gauge",
        "Items waiting on a provider's Retry-After after a throttle (part of retry_wait).",
        _of_status(lambda status, now: _one(status.throttled)),
    ),
    CampaignSeries(
        "benchledger_campaign_waiting_on_group",
        "gauge",
        "1 while the campaign's limit group's caps hold its claims back.",
        _of_status(lambda status, now: _flag(status.waiting_on_group)),
    ),
    CampaignSeries(
        "benchledger_campaign_completions",
        "counter",
        "Work items completed (succeeded).",
        _of_status(lambda status, now: _one(status.counts[WorkStatus.SUCCEEDED])),
    ),
    CampaignSeries(
        "benchledger_campaign_failures",
        "counter",
        "Attempts that failed (retried later, or failed for good), from the attempt history.",
        _attempts(AttemptOutcome.RETRY_SCHEDULED, AttemptOutcome.FAILED),
    ),
    CampaignSeries(
        "benchledger_campaign_retries_scheduled",
        "counter",
        "Failed attempts whose item was scheduled to be retried, from the attempt history.",
        _attempts(AttemptOutcome.RETRY_SCHEDULED),
    ),
    CampaignSeries(
        "benchledger_campaign_lease_losses",
        "counter",
        "Leases lost: the holder stopped renewing and a claim took the item back.",
        _attempts(AttemptOutcome.LEASE_EXPIRED),
    ),
    CampaignSeries(
        "benchledger_campaign_attempts",
        "counter",
        "Attempts recorded in the attempt history, by outcome.",
        _attempts_by_outcome,
        label="outcome",
    ),
    CampaignSeries(
        "benchledger_campaign_leases_expired",
        "gauge",
        "Leased items whose lease has expired and that no claim has taken back yet.",
        lambda campaign, now: _one(campaign.leases_expired),
    ),
    CampaignSeries(
        "benchledger_campaign_item_errors",
        "gauge",
        "Work items whose last attempt failed, by error code.",
        _of_status(_item_errors),
        label="code",
    ),
    CampaignSeries(
        "benchledger_campaign_report_state",
        "gauge",
        "The report finalization's state: 1 for the state it is in, 0 for the others.",
        _of_status(_report_state),
        label="state",
    ),
    CampaignSeries(
        "benchledger_campaign_complete",
        "gauge",
        "1 when every work item succeeded.",
        _of_status(lambda status, now: _flag(status.complete)),
    ),
    CampaignSeries(
        "benchledger_campaign_blocked",
        "gauge",
        "1 when an item or the report failed for good.",
        _of_status(lambda status, now: _flag(status.blocked)),
    ),
    CampaignSeries(
        "benchledger_campaign_cancelled",
        "gauge",
        "1 while an operator has cancelled the campaign.",
        _of_status(lambda status, now: _flag(status.cancelled)),
    ),
    CampaignSeries(
        "benchledger_campaign_archived",
        "gauge",
        "1 once the campaign was archived (its items dropped, its report kept).",
        _of_status(lambda status, now: _flag(status.archived_at is not None)),
    ),
    CampaignSeries(
        "benchledger_campaign_created_timestamp_seconds",
        "gauge",
        "When the campaign was created (epoch seconds).",
        lambda campaign, now: _one(campaign.created_at),
    ),
    CampaignSeries(
        "benchledger_campaign_last_activity_timestamp_seconds",
        "gauge",
        "When the campaign last moved (its updated_at, epoch seconds).",
        _of_status(lambda status, now: _one(status.updated_at)),
    ),
    CampaignSeries(
        "benchledger_campaign_next_due_timestamp_seconds",
        "gauge",
        "When the next retry, lease expiry or report attempt falls due (absent: never).",
        _of_status(lambda status, now: _given(status.next_due_at)),
    ),
    CampaignSeries(
        "benchledger_campaign_verify_ok",
        "gauge",
        "1 when the last integrity audit (campaign verify) found nothing (absent: never run).",
        _of_status(_verify_ok),
    ),
    CampaignSeries(
        "benchledger_campaign_verified_timestamp_seconds",
        "gauge",
        "When the last integrity audit ran (epoch seconds; absent: never).",
        _of_status(lambda status, now: _given(status.verified_at)),
    ),
    CampaignSeries(
        "benchledger_campaign_verify_age_seconds",
        "gauge",
        "Seconds since the last integrity audit ran (absent: never).",
        _of_status(_verify_age),
    ),
    CampaignSeries(
        "benchledger_campaign_verify_current",
        "gauge",
        "1 when nothing changed since the last integrity audit (absent: never run).",
        _of_status(_verify_current),
    ),
    CampaignSeries(
        "benchledger_campaign_changes_since_verify",
        "gauge",
        "Item outcomes recorded since the last integrity audit, counted up to 10,000.",
        _of_status(lambda status, now: _given(status.changes_since_verified)),
    ),
    CampaignSeries(
        "benchledger_campaign_status_error",
        "gauge",
        "1 when the campaign's status cannot be read, by the refusal's code.",
        _status_error,
        label="code",
    ),
)


def _state(study: StudyOverview) -> Samples:
    return (((str(state),), 1.0 if state == study.summary.state else 0.0) for state in StudyState)


def _budget(part: Callable[[int, int, int, int], int]) -> Callable[[StudyOverview], Samples]:
    """Per dimension, ``part(limit, charged, reserved, remaining)`` of the study's bars."""

    def values(study: StudyOverview) -> Samples:
        return (
            ((bar.dimension,), float(part(bar.limit, bar.charged, bar.reserved, bar.remaining)))
            for bar in study.bars
        )

    return values


#: Every study's series.
STUDY_SERIES: Final[tuple[StudySeries, ...]] = (
    StudySeries(
        "benchledger_study_state",
        "The study's state: 1 for the state it is in, 0 for the others.",
        _state,
        label="state",
    ),
    StudySeries(
        "benchledger_study_budget_limit",
        "The study's budget limit per dimension.",
        _budget(lambda limit, charged, reserved, remaining: limit),
        label="dimension",
    ),
    StudySeries(
        "benchledger_study_budget_used",
        "Budget used per dimension: charged to settled runs plus reserved by unsettled ones.",
        _budget(lambda limit, charged, reserved, remaining: charged + reserved),
        label="dimension",
    ),
    StudySeries(
        "benchledger_study_budget_reserved",
        "Budget reserved per dimension by runs not settled yet (part of used).",
        _budget(lambda limit, charged, reserved, remaining: reserved),
        label="dimension",
    ),
    StudySeries(
        "benchledger_study_budget_remaining",
        "Budget remaining per dimension (the limit less what is used, never below 0).",
        _budget(lambda limit, charged, reserved, remaining: remaining),
        label="dimension",
    ),
)


def _family(
    kind: str, name: str, documentation: str, labels: Sequence[str]
) -> CounterMetricFamily | GaugeMetricFamily:
    if kind == "counter":
        return CounterMetricFamily(name, documentation, labels=labels)
    return GaugeMetricFamily(name, documentation, labels=labels)


class LedgerCollector:
    """A prometheus_client collector of one scrape's reads."""

    def __init__(
        self,
        campaigns: CampaignMetricsSnapshot,
        studies: Sequence[StudyOverview],
        groups: Sequence[LimitGroupUsage] = (),
    ) -> None:
        self.campaigns = campaigns
        self.studies = studies
        self.groups = groups

    def _group_families(self) -> Iterator[Metric]:
        """Each limit group's caps and its usage against them (groups with caps only)."""
        caps = GaugeMetricFamily(
            "benchledger_limit_group_cap",
            "A limit group's cap, by kind (live_leases, claims_per_minute, cost_per_minute).",
            labels=["group", "cap"],
        )
        used = {
            "live_leases": "Live leases over the group's campaigns now.",
            "claims_last_minute": "Claims of the group's campaigns in the last 60 s.",
            "cost_last_minute": "Cost units the group's evaluators reported in the last 60 s.",
        }
        usage = {
            name: GaugeMetricFamily(f"benchledger_limit_group_{name}", text, labels=["group"])
            for name, text in used.items()
        }
        for group in self.groups:
            limits = group.group
            for cap, value in (
                ("live_leases", limits.max_concurrent_leases),
                ("claims_per_minute", limits.max_claims_per_minute),
                ("cost_per_minute", limits.max_cost_per_minute),
            ):
                if value is not None:
                    caps.add_metric([limits.key, cap], float(value))
            usage["live_leases"].add_metric([limits.key], float(group.live_leases))
            usage["claims_last_minute"].add_metric([limits.key], float(group.claims_last_minute))
            usage["cost_last_minute"].add_metric([limits.key], float(group.cost_last_minute))
        yield caps
        yield from usage.values()

    def collect(self) -> Iterator[Metric]:
        for series in CAMPAIGN_SERIES:
            labels = [*CAMPAIGN_LABELS, *([series.label] if series.label else [])]
            family = _family(series.kind, series.name, series.documentation, labels)
            for campaign in self.campaigns.campaigns:
                base = (campaign.short_id, campaign.name or "", campaign.candidate.label)
                for extra, value in series.values(campaign, self.campaigns.at):
                    family.add_metric([*base, *extra], value)
            yield family
        for study_series in STUDY_SERIES:
            labels = [*STUDY_LABELS, *([study_series.label] if study_series.label else [])]
            family = GaugeMetricFamily(study_series.name, study_series.documentation, labels=labels)
            for study in self.studies:
                names = (study.summary.id, study.summary.name)
                for extra, value in study_series.values(study):
                    family.add_metric([*names, *extra], value)
            yield family
        yield from self._group_families()
        yield GaugeMetricFamily(
            "benchledger_metrics_read_seconds",
            "Seconds this scrape's reads of the campaigns took.",
            value=self.campaigns.read_seconds,
        )


def study_budgets(views: StudyViews) -> tuple[StudyOverview, ...]:
    """Every study with its budget bars, in id order (pages of the study list)."""
    found: list[StudyOverview] = []
    cursor: str | None = None
    while True:
        page = views.page(cursor=cursor, limit=MAX_PAGE)
        found.extend(page.studies)
        cursor = page.next_cursor
        if cursor is None:
            return tuple(found)


class MetricsPages:
    """``/metrics``: one reader per served database (it keeps the history's totals)."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.reader = CampaignMetricsReader(pages.service, clock=pages.clock)

    def scrape(self) -> bytes:
        """The exposition of the ledger now (what the route returns)."""
        registry = CollectorRegistry()
        campaigns = self.pages.service
        groups = tuple(campaigns.group_usage(limits.key) for limits in campaigns.group_limits())
        registry.register(
            LedgerCollector(self.reader.read(), study_budgets(self.pages.studies), groups)
        )
        return generate_latest(registry)

    def metrics(self, request: Request) -> Response:
        try:
            body = self.scrape()
        except LedgerError as error:  # the database is away: the scrape fails, says why
            return PlainTextResponse(f"# {error.code}: {error.message}\n", 503)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
