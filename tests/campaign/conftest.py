"""Fixtures of the campaign tests: the service, the clock, a plan and its campaign.

The helpers they and the tests use are in ``helpers.py``.
"""

from __future__ import annotations

import pytest

from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

from .helpers import make_plan


@pytest.fixture
def service(campaign_service: CampaignService) -> CampaignService:
    return campaign_service


@pytest.fixture
def clock(ledger_clock: LedgerClock) -> LedgerClock:
    return ledger_clock


@pytest.fixture
def plan() -> CampaignPlan:
    return make_plan()


@pytest.fixture
def cid(service: CampaignService, plan: CampaignPlan) -> str:
    return service.create(plan.policy, plan.suite)
