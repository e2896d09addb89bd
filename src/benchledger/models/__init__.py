"""SQLAlchemy models. Importing this package registers every table on ``Base.metadata``."""

from benchledger.models import study  # the study tables (revision 0005)
from benchledger.models.base import Base, EpochSeconds
from benchledger.models.campaign import (
    AttemptRow,
    CampaignRow,
    LimitGroupRow,
    LimitGroupUsageRow,
    ReportRow,
    ReportStateRow,
    StoredPolicyRow,
    StoredSuiteRow,
    WorkRow,
)

__all__ = [
    "AttemptRow",
    "Base",
    "CampaignRow",
    "EpochSeconds",
    "LimitGroupRow",
    "LimitGroupUsageRow",
    "ReportRow",
    "ReportStateRow",
    "StoredPolicyRow",
    "StoredSuiteRow",
    "WorkRow",
    "study",
]
