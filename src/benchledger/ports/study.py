"""Ports of the study service: what it needs from its host (runs, materials, evidence, access).

Ports speak domain values only. Every call happens inside the service's one
transaction; an adapter that stores in the same database takes part in it
through :func:`benchledger.db.current_session` (as the defaults do), so a
write either happens entirely or not at all. Adapters raise
:class:`~benchledger.errors.StudyError` for refusals (``not_found``,
``forbidden``, ``unavailable``...), never a raw database error for bad input.

The defaults in :mod:`benchledger.adapters` store everything in the ledger's
own tables.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from benchledger.domain.study import Budget, RunState
from benchledger.domain.study_evidence import RunEvidence
from benchledger.domain.study_rules import Role
from benchledger.domain.study_runs import Material, MaterialRef, Run, RunRequest
from benchledger.domain.study_views import ExecutionGrant


@runtime_checkable
class RunRegistry(Protocol):
    """Custody of run attempts.

    Contract the service relies on: a run that is terminal with custody
    ceased (:attr:`Run.ceased`) never changes again, so a settled reservation
    stays settled.
    """

    def admit(self, request: RunRequest, *, now: float) -> Run:
        """Record one new attempt (state ``queued``) under ``request.run_id``."""
        ...

    def load(self, run_id: str) -> Run:
        """The run, or ``StudyError(not_found)``."""
        ...

    def cancel(self, run_id: str, *, now: float) -> Run:
        """Ask an active run to stop; a no-op for terminal or unknown runs."""
        ...

    def transition(
        self,
        run_id: str,
        state: RunState,
        *,
        now: float,
        custody_ceased: bool | None = None,
    ) -> Run:
        """Move a run to ``state`` (refusing illegal moves with ``conflict``)."""
        ...

    def custody_blocked(self) -> bool:
        """Whether the registry cannot vouch for some run's custody (continue refuses)."""
        ...


@runtime_checkable
class MaterialCatalog(Protocol):
    """Recipe materials and their resource envelopes."""

    def register(
        self,
        *,
        recipe: object,
        envelope: Budget,
        trainer_id: str,
        builtin: bool,
        now: float,
    ) -> Material:
        """Store a material (idempotent by content) and return it with its sha256."""
        ...

    def load(self, ref: MaterialRef) -> Material:
        """The material, its sha256 re-verified (``not_found`` / ``unavailable``)."""
        ...


@runtime_checkable
class EvidenceStore(Protocol):
    """Model evidence per run."""

    def record(self, evidence: RunEvidence, *, now: float) -> None:
        """Retain a run's evidence once; the same evidence again is a no-op."""
        ...

    def load(self, run_id: str) -> RunEvidence | None: ...


@runtime_checkable
class AccessPolicy(Protocol):
    """Role-based access: roles, permissions and execution grants."""

    def role_of(self, actor_id: str) -> Role | None: ...

    def require(self, actor_id: str, operation: str, *, study_id: str | None) -> Role:
        """The actor's role if it may perform ``operation``, else ``StudyError(forbidden)``."""
        ...

    def assign(self, subject_id: str, role: Role | None, *, by: str, now: float) -> None:
        """Give ``subject_id`` a role (``None`` removes it)."""
        ...

    def owner_count(self) -> int: ...

    def grant_execution(
        self,
        *,
        study_id: str,
        trial_id: str,
        material_sha256: str,
        consumer_actor_id: str,
        granted_by: str,
        ttl_seconds: int,
        now: float,
    ) -> ExecutionGrant: ...

    def consume_execution(
        self,
        grant_id: str,
        *,
        study_id: str,
        trial_id: str,
        consumer_actor_id: str,
        material_sha256: str,
        run_id: str,
        now: float,
    ) -> ExecutionGrant:
        """Use a grant once for ``run_id`` of its exact trial and material.

        Refuses (``forbidden``) any other use: another study, trial, actor or
        material, a used grant, an expired one.
        """
        ...
