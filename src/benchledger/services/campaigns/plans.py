"""The policy and suite of each campaign: read once, verified, cached per service;
and the check that a campaign's rows bind exactly its plan (``verify_binding``).

They are content-addressed (the campaign id *is* the policy's sha256, and the
policy names its suite's sha256), so a copy verified when it was loaded stays right.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy.orm import Session

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite
from benchledger.domain.campaign_rules import StateInvalid, require
from benchledger.domain.canonical import CanonicalJsonError, parse_canonical_json, sha256_text
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.store import CampaignRepository
from benchledger.repositories.campaigns.work import WorkRepository

#: Campaigns whose plan one service keeps (oldest forgotten first).
PLAN_CACHE_SIZE = 256


class CampaignPlans:
    """A service's cache of verified campaign plans (thread-safe)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._plans: dict[str, CampaignPlan] = {}
        self._lock = threading.Lock()

    def remember(self, plan: CampaignPlan) -> None:
        with self._lock:
            if len(self._plans) >= PLAN_CACHE_SIZE:
                self._plans.pop(next(iter(self._plans)))
            self._plans[plan.campaign_id] = plan

    def forget(self, campaign_id: str) -> None:
        with self._lock:
            self._plans.pop(campaign_id, None)

    def load(self, session: Session, campaign_id: Any) -> tuple[CampaignPlan, Any]:
        """Read and verify a campaign's stored policy and suite; the plan and campaign row."""
        if not dom.is_campaign_id(campaign_id):
            raise blocked(dom.NOT_FOUND)
        campaigns = CampaignRepository(session)
        row = campaigns.get(campaign_id)
        if row is None:
            raise blocked(dom.NOT_FOUND)
        policy_json = campaigns.policy_json(row.policy_sha256)
        suite_row = campaigns.suite_row(row.suite_sha256)
        if policy_json is None or suite_row is None:
            raise blocked(dom.POLICY_UNREGISTERED)
        try:
            require(sha256_text(policy_json) == row.policy_sha256)
            policy = CampaignPolicy.from_payload(parse_canonical_json(policy_json))
            # Proves the stored text canonical by its sha256, parsing it once (bounded memory).
            suite = Suite.from_canonical_text(suite_row.suite_json)
            require(suite.sha256 == row.suite_sha256)
            plan = CampaignPlan(policy, suite)
            require(suite_row.case_count == len(suite.cases))
            require(row.work_count == plan.work_count)
        except (StateInvalid, CanonicalJsonError, CampaignBlocked):
            raise blocked(dom.STATE_INVALID) from None
        if plan.campaign_id != campaign_id:
            raise blocked(dom.POLICY_MISMATCH)
        self.remember(plan)
        return plan, row

    def get(self, session: Session, campaign_id: Any) -> CampaignPlan:
        """The plan, cached or loaded in ``session``."""
        plan = self._plans.get(campaign_id) if isinstance(campaign_id, str) else None
        return plan if plan is not None else self.load(session, campaign_id)[0]

    def cached(self, campaign_id: Any) -> CampaignPlan:
        """The plan, cached or loaded in a read transaction of its own."""
        plan = self._plans.get(campaign_id) if isinstance(campaign_id, str) else None
        if plan is not None:
            return plan
        with self.db.read() as session:
            return self.load(session, campaign_id)[0]


def verify_binding(session: Session, plan: CampaignPlan, row: Any) -> None:
    """The campaign row binds ``plan``, and every expected item exists, and nothing else."""
    if (
        row.policy_sha256 != plan.policy.sha256
        or row.suite_sha256 != plan.suite.sha256
        or row.work_count != plan.work_count
    ):
        raise blocked(dom.STATE_INVALID)
    expected = {(w.work_id, w.target_locale, w.suite_case_key) for w in plan.work()}
    if WorkRepository(session).identities(plan.campaign_id) != expected:
        raise blocked(dom.STATE_INVALID)
