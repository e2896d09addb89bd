"""What a campaign looks like: the listing, its status, its health and the integrity audit.

Status and health are read by
:class:`~benchledger.services.campaigns.status.CampaignGauges`, the audit by
:class:`~benchledger.services.campaigns.integrity.CampaignInspector`; what
operators did (cancelled, paused) is added by ``services/campaigns/actions.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import HealthStatus, WorkStatus, blocked
from benchledger.domain.campaign_labels import CampaignFilter, candidate_of
from benchledger.domain.campaign_views import (
    CampaignHealth,
    CampaignList,
    CampaignStatus,
    CampaignSummary,
)
from benchledger.domain.integrity import IntegrityReport
from benchledger.repositories.campaigns.store import CampaignRepository
from benchledger.services.campaigns.actions import operator_reasons, operator_status
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.integrity import CampaignInspector
from benchledger.services.campaigns.status import CampaignGauges


def list_campaigns(
    context: CampaignContext,
    cursor: str | None,
    limit: int,
    where: CampaignFilter | None = None,
) -> CampaignList:
    """``CampaignService.list``: one keyset page of campaign rows (those ``where`` keeps)."""
    limit = dom.list_limit(limit)
    if cursor is not None and not dom.is_campaign_id(cursor):
        raise blocked(dom.PAGE_INVALID)
    if where is not None and not isinstance(where, CampaignFilter):
        raise blocked(dom.FILTER_INVALID)
    with context.db.read() as session:
        rows = CampaignRepository(session).page(cursor, limit + 1, where)
    if rows is None:
        raise blocked(dom.PAGE_INVALID)
    shown = [
        CampaignSummary(
            campaign_id=row.campaign_id,
            policy_sha256=row.policy_sha256,
            suite_sha256=row.suite_sha256,
            work_count=row.work_count,
            created_at=float(row.created_at),
            updated_at=float(row.updated_at),
            name=row.name,
            candidate=candidate_of(row),
            archived_at=None if row.archived_at is None else float(row.archived_at),
        )
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return CampaignList(tuple(shown), limit, shown[-1].campaign_id if more else None)


def status(context: CampaignContext, gauges: CampaignGauges, campaign_id: str) -> CampaignStatus:
    """``CampaignService.status``: the gauges' counters, with an operator's cancel."""
    return operator_status(context.db, gauges.status(campaign_id))


def health(
    context: CampaignContext,
    gauges: CampaignGauges,
    inspector: CampaignInspector,
    campaign_id: str,
    now: float | None,
    stale_after_seconds: float,
    verify: bool,
    progress: Callable[[int, int], None] | None,
) -> CampaignHealth:
    """``CampaignService.health``: the gauges' snapshot, operators' reasons, the audit."""
    current = context.now(now)
    stale = dom.timestamp(stale_after_seconds)
    if not 0 < stale <= dom.MAX_STALE_SECONDS:
        raise blocked(dom.STALE_THRESHOLD_INVALID)
    if not isinstance(verify, bool) or not (progress is None or callable(progress)):
        raise blocked(dom.DEPENDENCY_INVALID)
    if not verify:  # operator_reasons: cancelled, paused (services/campaigns/actions.py)
        return operator_reasons(context.db, gauges.health(campaign_id, current, stale))
    report = inspector.verify(campaign_id, current, progress)
    health = operator_reasons(context.db, gauges.health(campaign_id, current, stale))
    if report.ok:
        return attrs.evolve(health, integrity=report)
    reasons = set(health.reasons) | set(report.reasons)
    only_skew = not report.blocking
    failed = dict(health.counts).get(WorkStatus.FAILED, 0)
    return attrs.evolve(
        health,
        status=dom.health_status(reasons, failed) if only_skew else HealthStatus.BLOCKED,
        reasons=tuple(sorted(reasons)),
        report_ready=health.report_ready and only_skew,
        integrity=report,
    )


def verify(
    context: CampaignContext,
    inspector: CampaignInspector,
    campaign_id: str,
    now: float | None,
    progress: Callable[[int, int], None] | None,
) -> IntegrityReport:
    """``CampaignService.verify``: the inspector's full audit."""
    if not (progress is None or callable(progress)):
        raise blocked(dom.DEPENDENCY_INVALID)
    return inspector.verify(campaign_id, context.now(now), progress)
