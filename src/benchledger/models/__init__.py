"""SQLAlchemy models. Importing this package registers every table on ``Base.metadata``."""

from benchledger.models.base import Base, EpochSeconds
from benchledger.models.campaign import (
    CampaignRow,
    ReportRow,
    ReportStateRow,
    StoredPolicyRow,
    StoredSuiteRow,
    WorkRow,
)

__all__ = [
    "Base",
    "CampaignRow",
    "EpochSeconds",
    "ReportRow",
    "ReportStateRow",
    "StoredPolicyRow",
    "StoredSuiteRow",
    "WorkRow",
]
