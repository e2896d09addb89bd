"""benchledger: a durable, auditable ledger of evaluation work."""

from benchledger.db import Database
from benchledger.errors import (
    CampaignBlocked,
    DependencyFailed,
    LedgerError,
    SchemaError,
    StudyError,
)

__version__ = "0.1.0"

__all__ = [
    "CampaignBlocked",
    "Database",
    "DependencyFailed",
    "LedgerError",
    "SchemaError",
    "StudyError",
    "__version__",
]
