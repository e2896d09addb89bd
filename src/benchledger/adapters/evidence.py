"""The default evidence store: metric definitions, checkpoint index, observations, coverage."""

from __future__ import annotations

from benchledger.db import current_session
from benchledger.domain.study import refuse
from benchledger.domain.study_evidence import RunEvidence
from benchledger.repositories.study_adapters import EvidenceRepository


class SqlEvidenceStore:
    """:class:`~benchledger.ports.study.EvidenceStore` over the ``study_run_*`` tables.

    Evidence is retained once per run; its sha256 is recorded and re-verified
    on every load.
    """

    def record(self, evidence: RunEvidence, *, now: float) -> None:
        if not isinstance(evidence, RunEvidence):
            raise refuse("Evidence must be a RunEvidence.")
        store = EvidenceRepository(current_session())
        existing = store.evidence_sha256(evidence.run_id)
        if existing is not None:
            if existing != evidence.sha256:
                raise refuse("Run evidence is already retained and differs.", "conflict")
            return
        store.add(evidence, now)

    def load(self, run_id: str) -> RunEvidence | None:
        found = EvidenceRepository(current_session()).get(run_id)
        if found is None:
            return None
        evidence, recorded_sha256 = found
        if evidence.sha256 != recorded_sha256:
            raise refuse("Retained run evidence identity differs.", "unavailable")
        return evidence
