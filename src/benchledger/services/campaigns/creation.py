"""Creating a campaign (its row, one pending item per locale x case, the report state)
and registering the stored policy and suite of one adopted from the legacy store."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import retry_lost_races
from benchledger.db.notify import notify_work
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_archive import is_archived
from benchledger.domain.campaign_labels import (
    Candidate,
    campaign_name,
    evaluator_name,
    limit_group_key,
)
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite
from benchledger.domain.campaign_rules import cap_value
from benchledger.domain.canonical import canonical_json
from benchledger.repositories.campaigns.actions import CampaignActionRepository
from benchledger.repositories.campaigns.reports import ReportRepository
from benchledger.repositories.campaigns.store import CampaignRepository
from benchledger.repositories.campaigns.work import WorkRepository, analyze_work
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.plans import verify_binding

log = logging.getLogger("benchledger.campaigns")


def create(
    context: CampaignContext,
    policy: CampaignPolicy,
    suite: Suite,
    max_attempts: int,
    now: float | None,
    max_concurrent_leases: int | None,
    max_claims_per_minute: int | None,
    name: str | None = None,
    max_throttles: int = dom.DEFAULT_MAX_THROTTLES,
    limit_group: str | None = None,
    evaluator: str | None = None,
) -> str:
    """``CampaignService.create``: insert the campaign, or verify the one stored (idempotent)."""
    name = campaign_name(name)
    max_throttles = dom.max_throttles_value(max_throttles)
    group = limit_group_key(limit_group)
    evaluator = evaluator_name(evaluator)
    caps = {
        name: cap_value(value)
        for name, value in (
            ("max_concurrent_leases", max_concurrent_leases),
            ("max_claims_per_minute", max_claims_per_minute),
        )
        if value is not None
    }
    if not isinstance(policy, CampaignPolicy):
        raise blocked(dom.POLICY_INVALID)
    if not isinstance(suite, Suite):
        raise blocked(dom.SUITE_INVALID)
    max_attempts = dom.max_attempts_value(max_attempts)
    current = context.now(now)
    policy.require_current(current)
    plan = CampaignPlan(policy, suite)

    def attempt() -> bool:
        inserted = False
        with context.db.write() as session:
            row = CampaignRepository(session).get(plan.campaign_id)
            if row is None:
                _insert(session, plan, max_attempts, current, name, max_throttles)
                inserted = True
                # A campaign shares its provider's limits unless told otherwise.
                group_of = group if group is not None else plan.policy.candidate_provider_id
                CampaignRepository(session).set_routing(plan.campaign_id, group_of, evaluator)
                notify_work(session.connection(), plan.campaign_id)  # idle fleets: new work
            else:
                if is_archived(row):  # its items were dropped: nothing to verify or run
                    raise blocked(dom.ARCHIVED)
                verify_binding(session, plan, row)
                if WorkRepository(session).attempts_range(plan.campaign_id) != (
                    max_attempts,
                    max_attempts,
                ):
                    raise blocked(dom.ATTEMPTS_MISMATCH)
                if name is not None and row.name != name:
                    CampaignRepository(session).set_name(plan.campaign_id, name)
                if (group is not None and row.limit_group != group) or (
                    evaluator is not None and row.evaluator != evaluator
                ):
                    CampaignRepository(session).set_routing(
                        plan.campaign_id, group or row.limit_group, evaluator or row.evaluator
                    )
            store_plan(session, plan, current)
            if caps:
                CampaignActionRepository(session).set_caps(plan.campaign_id, caps)
        return inserted

    # A lost race (another process created it between our read and insert) runs the
    # transaction again, which verifies theirs; a second collision is state_invalid.
    inserted = retry_lost_races(attempt, attempts=2, collided=lambda: blocked(dom.STATE_INVALID))
    if inserted and plan.work_count >= ANALYZE_FROM_ITEMS and context.db.dialect_name != "sqlite":
        _analyze(context, plan.campaign_id)
    context.plans.remember(plan)
    return plan.campaign_id


#: A campaign of this many items or more has the planner's statistics refreshed once it
#: is created (PostgreSQL; :func:`~benchledger.repositories.campaigns.work.analyze_work`).
#: Below it, a claim's misestimated plan costs less than the ANALYZE (0.15-0.4 s).
ANALYZE_FROM_ITEMS = 2_000


def _analyze(context: CampaignContext, campaign_id: str) -> None:
    """Refresh the statistics after the campaign's commit. The campaign exists whatever
    happens here: a failure (a lock held past the timeout, a lost connection) is
    logged, and autovacuum refreshes them later."""
    try:
        with context.db.write_connection() as connection:
            analyze_work(connection)
    except sa.exc.DBAPIError as error:
        log.warning(
            "campaign %s: the planner's statistics were not refreshed (%s); "
            "its first claims may be slow until autovacuum analyzes the table",
            campaign_id,
            type(error.orig).__name__,
        )


def _insert(
    session: Session,
    plan: CampaignPlan,
    max_attempts: int,
    now: float,
    name: str | None,
    max_throttles: int,
) -> None:
    """The campaign row, its pending items and its pending report state."""
    CampaignRepository(session).insert(
        plan.campaign_id,
        plan.policy.sha256,
        plan.suite.sha256,
        plan.work_count,
        now,
        max_attempts,
        candidate_of_policy(plan.policy),
        name,
    )
    WorkRepository(session).insert_pending(
        plan.campaign_id,
        ((w.work_id, w.target_locale, w.suite_case_key) for w in plan.work()),
        max_attempts,
        now,
        max_throttles,
    )
    ReportRepository(session).insert_state(plan.campaign_id, max_attempts, now)


def register(
    context: CampaignContext, policy: CampaignPolicy, suite: Suite, now: float | None
) -> str:
    """``CampaignService.register``: store the plan of an existing campaign that binds it."""
    if not isinstance(policy, CampaignPolicy):
        raise blocked(dom.POLICY_INVALID)
    if not isinstance(suite, Suite):
        raise blocked(dom.SUITE_INVALID)
    current = context.now(now)
    plan = CampaignPlan(policy, suite)
    with context.db.write() as session:
        row = CampaignRepository(session).get(plan.campaign_id)
        if row is None:
            raise blocked(dom.NOT_FOUND)
        verify_binding(session, plan, row)
        store_plan(session, plan, current)
        CampaignRepository(session).set_candidate(
            plan.campaign_id, candidate_of_policy(plan.policy)
        )
    context.plans.remember(plan)
    return plan.campaign_id


def rename(context: CampaignContext, campaign_id: str, name: str | None) -> None:
    """``CampaignService.rename``: the name is metadata (``name_invalid``, ``not_found``)."""
    name = campaign_name(name)
    if not dom.is_campaign_id(campaign_id):
        raise blocked(dom.NOT_FOUND)
    with context.db.write() as session:
        if not CampaignRepository(session).set_name(campaign_id, name):
            raise blocked(dom.NOT_FOUND)


def candidate_of_policy(policy: CampaignPolicy) -> Candidate:
    """The candidate a policy measures, as the campaign row keeps it."""
    return Candidate(
        policy.candidate_provider_id, policy.candidate_model_id, policy.candidate_model_version
    )


def store_plan(session: Session, plan: CampaignPlan, now: float) -> None:
    """Store the policy and suite as canonical JSON (content-addressed, insert if absent)."""
    campaigns = CampaignRepository(session)
    policy_json = canonical_json(plan.policy.as_payload())
    suite_json = canonical_json(plan.suite.manifest())
    campaigns.put_policy(plan.policy.sha256, policy_json, now)
    campaigns.put_suite(plan.suite.sha256, suite_json, len(plan.suite.cases), now)
    # Content-addressed rows that already existed must hold exactly this content.
    if campaigns.policy_json(plan.policy.sha256) != policy_json:
        raise blocked(dom.STATE_INVALID)
    if campaigns.suite_json(plan.suite.sha256) != suite_json:
        raise blocked(dom.STATE_INVALID)
