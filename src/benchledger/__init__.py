"""benchledger: a durable, auditable ledger of evaluation work.

The public names are imported on first use (PEP 562 ``__getattr__``), so
``import benchledger`` is cheap, and so is every ``import benchledger.<module>``
(which runs this file first): the command line imports only what a command
needs, and a Ctrl-C while it starts does not land in the middle of importing
every service. Type checkers and IDEs see the names through the
``TYPE_CHECKING`` imports below, which list exactly what ``_EXPORTS`` maps
(a test keeps the two, and ``__all__``, in step).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: The installed distribution's version (``pyproject.toml`` is its one source), read on first use.
__version__: str

#: Every public name and the module that defines it (imported when first used).
_EXPORTS: dict[str, str] = {
    name: module
    for module, names in (
        ("benchledger.adapters.reporting", ("DefaultReportBuilder",)),
        (
            "benchledger.adapters.verification",
            (
                "HmacAttestationSigner",
                "HmacAttestationVerifier",
                "StructuralResultVerifier",
            ),
        ),
        ("benchledger.aio.campaigns", ("AsyncCampaignService",)),
        ("benchledger.aio.db", ("AsyncDatabase",)),
        ("benchledger.aio.worker", ("AsyncWorker",)),
        ("benchledger.db", ("Database",)),
        ("benchledger.domain.campaign_plan", ("CampaignPolicy", "Suite", "SuiteCase")),
        (
            "benchledger.domain.campaign_results",
            ("CaseOutcome", "ClaimedCase", "ClaimedReport", "Outcome", "ReportOutcome"),
        ),
        (
            "benchledger.domain.campaign_views",
            ("CampaignHealth", "CampaignList", "CampaignStatus", "CampaignSummary"),
        ),
        (
            "benchledger.domain.study",
            ("Budget", "RunState", "SelectionPolicy", "StudyState"),
        ),
        (
            "benchledger.domain.study_evidence",
            (
                "CapabilityCoverage",
                "MetricDefinition",
                "Observation",
                "RunEvidence",
            ),
        ),
        ("benchledger.domain.study_rules", ("Role",)),
        ("benchledger.domain.study_runs", ("MaterialRef", "Run")),
        (
            "benchledger.domain.study_views",
            (
                "Admission",
                "CandidateResult",
                "Checkpoint",
                "Reservation",
                "Study",
                "StudyPage",
                "Trial",
            ),
        ),
        (
            "benchledger.errors",
            (
                "CampaignBlocked",
                "DependencyFailed",
                "LedgerError",
                "SchemaError",
                "StudyError",
                "Throttled",
            ),
        ),
        ("benchledger.faults", ("DatabaseUnavailable", "OutagePolicy")),
        ("benchledger.services.campaigns", ("CampaignService",)),
        ("benchledger.services.studies", ("StudyService",)),
        ("benchledger.workers.drivers", ("run_next_case", "run_report_finalization")),
        ("benchledger.workers.fleet", ("FleetWorker",)),
        ("benchledger.workers.loop", ("Worker", "WorkerProgress", "WorkerSummary")),
    )
    for name in names
}

if TYPE_CHECKING:
    from benchledger.adapters.reporting import DefaultReportBuilder
    from benchledger.adapters.verification import (
        HmacAttestationSigner,
        HmacAttestationVerifier,
        StructuralResultVerifier,
    )
    from benchledger.aio.campaigns import AsyncCampaignService
    from benchledger.aio.db import AsyncDatabase
    from benchledger.aio.worker import AsyncWorker
    from benchledger.db import Database
    from benchledger.domain.campaign_plan import CampaignPolicy, Suite, SuiteCase
    from benchledger.domain.campaign_results import (
        CaseOutcome,
        ClaimedCase,
        ClaimedReport,
        Outcome,
        ReportOutcome,
    )
    from benchledger.domain.campaign_views import (
        CampaignHealth,
        CampaignList,
        CampaignStatus,
        CampaignSummary,
    )
    from benchledger.domain.study import Budget, RunState, SelectionPolicy, StudyState
    from benchledger.domain.study_evidence import (
        CapabilityCoverage,
        MetricDefinition,
        Observation,
        RunEvidence,
    )
    from benchledger.domain.study_rules import Role
    from benchledger.domain.study_runs import MaterialRef, Run
    from benchledger.domain.study_views import (
        Admission,
        CandidateResult,
        Checkpoint,
        Reservation,
        Study,
        StudyPage,
        Trial,
    )
    from benchledger.errors import (
        CampaignBlocked,
        DependencyFailed,
        LedgerError,
        SchemaError,
        StudyError,
        Throttled,
    )
    from benchledger.faults import DatabaseUnavailable, OutagePolicy
    from benchledger.services.campaigns import CampaignService
    from benchledger.services.studies import StudyService
    from benchledger.workers.drivers import run_next_case, run_report_finalization
    from benchledger.workers.fleet import FleetWorker
    from benchledger.workers.loop import Worker, WorkerProgress, WorkerSummary

__all__ = [
    "Admission",
    "AsyncCampaignService",
    "AsyncDatabase",
    "AsyncWorker",
    "Budget",
    "CampaignBlocked",
    "CampaignHealth",
    "CampaignList",
    "CampaignPolicy",
    "CampaignService",
    "CampaignStatus",
    "CampaignSummary",
    "CandidateResult",
    "CapabilityCoverage",
    "CaseOutcome",
    "Checkpoint",
    "ClaimedCase",
    "ClaimedReport",
    "Database",
    "DatabaseUnavailable",
    "DefaultReportBuilder",
    "DependencyFailed",
    "FleetWorker",
    "HmacAttestationSigner",
    "HmacAttestationVerifier",
    "LedgerError",
    "MaterialRef",
    "MetricDefinition",
    "Observation",
    "OutagePolicy",
    "Outcome",
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
    "Throttled",
    "Trial",
    "Worker",
    "WorkerProgress",
    "WorkerSummary",
    "__version__",
    "run_next_case",
    "run_report_finalization",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("benchledger")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            found = "0+unknown"
        globals()[name] = found
        return found
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
