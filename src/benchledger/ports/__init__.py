"""Ports: Protocols for the collaborators services need; defaults live in ``adapters``."""

from benchledger.ports.campaign import Evaluate, Heartbeat, ReportBuilder, ResultVerifier

__all__ = [
    "Evaluate",
    "Heartbeat",
    "ReportBuilder",
    "ResultVerifier",
]
