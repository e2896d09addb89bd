"""benchledger: a durable, auditable ledger of evaluation work."""

from benchledger.db import Database
from benchledger.domain.study import (
    Admission,
    Budget,
    CandidateResult,
    Checkpoint,
    MaterialRef,
    Reservation,
    RunState,
    SelectionPolicy,
    Study,
    StudyPage,
    StudyState,
    Trial,
)
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
)
from benchledger.domain.study_rules import Role
from benchledger.errors import (
    CampaignBlocked,
    DependencyFailed,
    LedgerError,
    SchemaError,
    StudyError,
)
from benchledger.services.studies import StudyService

__version__ = "0.1.0"

__all__ = [
    "Admission",
    "Budget",
    "CampaignBlocked",
    "CandidateResult",
    "CapabilityCoverage",
    "Checkpoint",
    "Database",
    "DependencyFailed",
    "LedgerError",
    "MaterialRef",
    "MetricDefinition",
    "Observation",
    "Reservation",
    "Role",
    "RunEvidence",
    "RunState",
    "SchemaError",
    "SelectionPolicy",
    "Study",
    "StudyError",
    "StudyPage",
    "StudyService",
    "StudyState",
    "Trial",
    "__version__",
]
