"""benchledger: a durable, auditable ledger of evaluation work."""

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.adapters.verification import (
    HmacAttestationSigner,
    HmacAttestationVerifier,
    StructuralResultVerifier,
)
from benchledger.db import Database
from benchledger.domain.campaign import (
    CampaignHealth,
    CampaignPolicy,
    CampaignStatus,
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
    Suite,
    SuiteCase,
)
from benchledger.domain.study import (
    Admission,
    Budget,
    CandidateResult,
    Checkpoint,
    MaterialRef,
    Reservation,
    Run,
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
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.services.worker import (
    Worker,
    WorkerProgress,
    WorkerSummary,
    run_next_case,
    run_report_finalization,
)

__version__ = "0.1.0"

__all__ = [
    "Admission",
    "Budget",
    "CampaignBlocked",
    "CampaignHealth",
    "CampaignPolicy",
    "CampaignService",
    "CampaignStatus",
    "CandidateResult",
    "CapabilityCoverage",
    "CaseOutcome",
    "Checkpoint",
    "ClaimedCase",
    "ClaimedReport",
    "Database",
    "DefaultReportBuilder",
    "DependencyFailed",
    "HmacAttestationSigner",
    "HmacAttestationVerifier",
    "LedgerError",
    "MaterialRef",
    "MetricDefinition",
    "Observation",
    "ReportOutcome",
    "Reservation",
    "Role",
    "Run",
    "RunEvidence",
    "RunState",
    "SchemaError",
    "SelectionPolicy",
    "StructuralResultVerifier",
    "Study",
    "StudyError",
    "StudyPage",
    "StudyService",
    "StudyState",
    "Suite",
    "SuiteCase",
    "Trial",
    "Worker",
    "WorkerProgress",
    "WorkerSummary",
    "__version__",
    "run_next_case",
    "run_report_finalization",
]
