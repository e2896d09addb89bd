"""Ports: Protocols for the collaborators services need; defaults live in ``adapters``."""

from benchledger.ports.campaign import Evaluate, Heartbeat, ReportBuilder, ResultVerifier
from benchledger.ports.study import AccessPolicy, EvidenceStore, MaterialCatalog, RunRegistry

__all__ = [
    "AccessPolicy",
    "Evaluate",
    "EvidenceStore",
    "Heartbeat",
    "MaterialCatalog",
    "ReportBuilder",
    "ResultVerifier",
    "RunRegistry",
]
