"""factory-boy factories for benchledger's value objects and models.

Value-object factories (``factory.Factory``) return the real attrs objects.
Model factories (:class:`LedgerModelFactory`) flush into the session bound by
:func:`bind_factories` -- in tests, the ``ledger_session`` fixture's.
"""

from benchledger.testing.factories._binding import (
    LedgerModelFactory,
    bind_factories,
    bound_session,
    factory_now,
)
from benchledger.testing.factories.campaign import (
    TEST_FAILURE_CODE,
    CampaignPlanFactory,
    CampaignPolicyFactory,
    CampaignRowFactory,
    ReportRowFactory,
    ReportStateRowFactory,
    StoredPolicyRowFactory,
    StoredSuiteRowFactory,
    SuiteCaseFactory,
    SuiteFactory,
    WorkRowFactory,
    case_result,
    plan_results,
)

__all__ = [
    "TEST_FAILURE_CODE",
    "CampaignPlanFactory",
    "CampaignPolicyFactory",
    "CampaignRowFactory",
    "LedgerModelFactory",
    "ReportRowFactory",
    "ReportStateRowFactory",
    "StoredPolicyRowFactory",
    "StoredSuiteRowFactory",
    "SuiteCaseFactory",
    "SuiteFactory",
    "WorkRowFactory",
    "bind_factories",
    "bound_session",
    "case_result",
    "factory_now",
    "plan_results",
]
