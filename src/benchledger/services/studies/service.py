"""StudyService: finite experiment studies with conservative admission accounting.

A study is a finite :class:`~benchledger.domain.study.Budget` plus a
content-addressed :class:`~benchledger.domain.study.SelectionPolicy`; trials
are immutable members; ``admit`` reserves a run attempt's whole resource
envelope; ``reconcile`` settles reservations from run state but keeps the
worst-case charge; ``stop`` / ``continue_study`` move admission epochs; and
``select_candidate`` retains a diagnostic checkpoint decision.

Every write

- takes the acting actor and is authorized (``forbidden`` otherwise);
- is one database transaction that first locks the study row;
- is idempotent per (actor, operation, request key): the key is bound to the
  sha256 of the request, a replay returns the identical receipt and the same
  key with other inputs is a ``conflict``;
- checks the study revision the caller last saw (``stale`` otherwise);
- appends to the audit log.

This class is a facade: each method hands its arguments to the module that does
that job; every write runs in one unit, :func:`.write.write`, and the writes of
an existing study in the write path built on it, :func:`.write.write_study`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from benchledger.adapters.access import SqlAccessPolicy
from benchledger.adapters.evidence import SqlEvidenceStore
from benchledger.adapters.materials import SqlMaterialCatalog
from benchledger.adapters.runs import SqlRunRegistry
from benchledger.db import Database
from benchledger.domain.study import (
    DEFAULT_GRANT_TTL_SECONDS,
    MAX_LIST_PAGE,
    MAX_STUDY_PAGE,
    Budget,
    RunState,
    SelectionPolicy,
    describe,
    refuse,
)
from benchledger.domain.study_evidence import RunEvidence
from benchledger.domain.study_rules import Role
from benchledger.domain.study_runs import Material, MaterialRef, Run
from benchledger.domain.study_views import (
    Admission,
    CandidatePage,
    CandidateResult,
    ExecutionGrant,
    StopOutcome,
    Study,
    StudyList,
    StudyPage,
    Trial,
)
from benchledger.faults import Outage, OutagePolicy
from benchledger.ports.study import AccessPolicy, EvidenceStore, MaterialCatalog, RunRegistry
from benchledger.services.studies import (
    access,
    admissions,
    custody,
    lifecycle,
    reads,
    selection,
    trials,
)
from benchledger.services.studies.context import StudyContext


class StudyService:
    """Experiment studies over a :class:`~benchledger.Database`.

    ``runs``, ``materials``, ``evidence`` and ``access`` are the ports of
    :mod:`benchledger.ports.study`; the defaults store in the same database and
    share each operation's transaction. ``clock`` returns epoch seconds.
    """

    def __init__(
        self,
        db: Database,
        *,
        runs: RunRegistry | None = None,
        materials: MaterialCatalog | None = None,
        evidence: EvidenceStore | None = None,
        access: AccessPolicy | None = None,
        clock: Callable[[], float] = time.time,
        outage: Outage | OutagePolicy | None = None,
    ) -> None:
        if not isinstance(db, Database):
            raise refuse(f"A StudyService needs a benchledger Database, not {describe(db)}.")
        for port, protocol in (
            (runs, RunRegistry),
            (materials, MaterialCatalog),
            (evidence, EvidenceStore),
            (access, AccessPolicy),
        ):
            if port is not None and not isinstance(port, protocol):
                raise refuse(f"{describe(port).capitalize()} is not a {protocol.__name__}.")
        if not callable(clock):
            raise refuse("The clock must be callable (returning epoch seconds).")
        # Rides out a restart within ``outage`` (default: a few seconds), then
        # ledger.database.unavailable; never a raw SQLAlchemy error.
        db.require_current_schema(outage=outage)
        self.db = db
        self.runs: RunRegistry = runs if runs is not None else SqlRunRegistry()
        self.materials: MaterialCatalog = (
            materials if materials is not None else SqlMaterialCatalog()
        )
        self.evidence: EvidenceStore = evidence if evidence is not None else SqlEvidenceStore()
        self.access: AccessPolicy = access if access is not None else SqlAccessPolicy()
        self.clock = clock

    @property
    def context(self) -> StudyContext:
        """The database, ports and clock every job receives."""
        return StudyContext(
            self.db, self.runs, self.materials, self.evidence, self.access, self.clock
        )

    # == access ===========================================================================

    def bootstrap_owner(self, actor: str) -> Role:
        """Make ``actor`` the first owner; refused (``forbidden``) once the ledger has one."""
        return access.bootstrap_owner(self.context, actor)

    def grant_role(self, actor: str, subject: str, role: Role | str) -> Role:
        """Owner-only: give ``subject`` a role (replacing any other)."""
        return access.grant_role(self.context, actor, subject, role)

    def revoke_role(self, actor: str, subject: str) -> None:
        """Owner-only: remove ``subject``'s role; the last owner cannot be removed."""
        access.revoke_role(self.context, actor, subject)

    def role_of(self, actor: str) -> Role | None:
        """The actor's own role (no permission needed to learn it)."""
        return access.role_of(self.context, actor)

    # == host collaborators (through the ports) ===========================================

    def register_material(
        self,
        actor: str,
        *,
        recipe: object,
        envelope: Budget,
        trainer_id: str,
        builtin: bool = False,
    ) -> Material:
        """Register a recipe material (idempotent by content) with its envelope and trainer.

        The recipe is canonical JSON data of at most 1 MiB; registering the same
        material again returns it and writes nothing.
        """
        return custody.register_material(
            self.context,
            actor,
            recipe=recipe,
            envelope=envelope,
            trainer_id=trainer_id,
            builtin=builtin,
        )

    def report_run(
        self,
        actor: str,
        run_id: str,
        state: RunState | str,
        *,
        custody_ceased: bool | None = None,
    ) -> Run:
        """Report a run's new state to the run registry (a worker or supervisor)."""
        return custody.report_run(self.context, actor, run_id, state, custody_ceased=custody_ceased)

    def run(self, actor: str, run_id: str) -> Run:
        """A run attempt a study admitted, as the run registry reports it now.

        The registry's answer is checked to be the very attempt its reservation
        admitted (same study, trial, actor, request, material and parent), else
        ``unavailable``; a run no study admitted is ``not_found``. Needs the
        ``inspect`` permission.
        """
        return custody.run(self.context, actor, run_id)

    def record_evidence(self, actor: str, evidence: RunEvidence) -> None:
        """Retain a run's model evidence (once; the same evidence again is a no-op)."""
        custody.record_evidence(self.context, actor, evidence)

    def run_evidence(self, actor: str, run_id: str) -> RunEvidence | None:
        """The model evidence retained for a run a study admitted (``None`` before any).

        The evidence store re-verifies its digest (``unavailable`` if it
        differs); a run no study admitted is ``not_found``. Needs the
        ``inspect`` permission.
        """
        return custody.run_evidence(self.context, actor, run_id)

    # == studies ==========================================================================

    def create(
        self,
        actor: str,
        *,
        name: str,
        limits: Budget,
        policy: SelectionPolicy,
        request_key: str,
    ) -> Study:
        """Owner-only: a new draft study (revision 1, epoch 0, no members)."""
        return lifecycle.create(
            self.context, actor, name=name, limits=limits, policy=policy, request_key=request_key
        )

    def save(
        self,
        actor: str,
        study_id: str,
        *,
        revision: int,
        name: str,
        limits: Budget,
        policy: SelectionPolicy,
        request_key: str,
    ) -> Study:
        """Owner-only: edit name, limits and policy; limits never below what is charged."""
        return lifecycle.save(
            self.context,
            actor,
            study_id,
            revision=revision,
            name=name,
            limits=limits,
            policy=policy,
            request_key=request_key,
        )

    def get(
        self,
        actor: str,
        study_id: str,
        *,
        offset: int = 0,
        limit: int = MAX_STUDY_PAGE,
        revision: int | None = None,
    ) -> StudyPage:
        """The study, a page of its reservations and its charge; later pages pin a revision."""
        return reads.get(
            self.context, actor, study_id, offset=offset, limit=limit, revision=revision
        )

    def list(
        self, actor: str, *, cursor: str | None = None, limit: int = MAX_LIST_PAGE
    ) -> StudyList:
        """Study summaries in id order, ``limit`` at a time (``next_cursor`` continues)."""
        return reads.study_list(self.context, actor, cursor=cursor, limit=limit)

    def policy(self, actor: str, sha256: str) -> SelectionPolicy:
        """A stored selection policy by its sha256."""
        return reads.policy(self.context, actor, sha256)

    def trial(self, actor: str, trial_id: str) -> Trial:
        """A member trial by id."""
        return reads.trial(self.context, actor, trial_id)

    # == membership =======================================================================

    def prepare_trial(
        self,
        actor: str,
        study_id: str,
        *,
        revision: int,
        material: MaterialRef | Material,
        replicate: int,
        request_key: str,
    ) -> Trial:
        """Add an immutable member: one registered material and a replicate number.

        A material/replicate pair joins a study once; a study holds at most
        10,000 members; each member starts a new membership revision.
        """
        return trials.prepare_trial(
            self.context,
            actor,
            study_id,
            revision=revision,
            material=material,
            replicate=replicate,
            request_key=request_key,
        )

    # == lifecycle ========================================================================

    def open_study(self, actor: str, study_id: str, *, revision: int, request_key: str) -> Study:
        """Owner-only: open a *draft* for admission (epoch 0 → 1).

        The first opening of a draft (``continue_study`` at epoch 0 would be the
        same move); refused (``conflict``) for a study that is not a draft.
        """
        return lifecycle.open_study(
            self.context, actor, study_id, revision=revision, request_key=request_key
        )

    def continue_study(
        self, actor: str, study_id: str, *, revision: int, admission_epoch: int, request_key: str
    ) -> Study:
        """Owner-only: open the next admission epoch.

        Requires the exact current epoch, every child run ceased (none active or
        of unknown custody), and remaining budget in every dimension.
        """
        return lifecycle.continue_study(
            self.context,
            actor,
            study_id,
            revision=revision,
            admission_epoch=admission_epoch,
            request_key=request_key,
        )

    def stop(self, actor: str, study_id: str, *, revision: int, request_key: str) -> StopOutcome:
        """Close the admission epoch, then cancel the runs that have not ceased.

        The receipt (the closed epoch and the pending runs) is committed before
        any cancel is sent; a replay returns it unchanged, re-sends the cancels
        (harmless) and reports the study's current status.
        """
        return lifecycle.stop(
            self.context, actor, study_id, revision=revision, request_key=request_key
        )

    def reconcile(self, actor: str, study_id: str) -> StudyPage:
        """Settle reservations from run state; close admission when custody is unknown.

        A convergent observation with no inputs but the study: repeating it
        changes nothing more, so it takes no request key or revision.
        """
        return lifecycle.reconcile(self.context, actor, study_id)

    # == execution ========================================================================

    def approve(
        self,
        actor: str,
        study_id: str,
        *,
        revision: int,
        trial_id: str,
        expected_material_sha256: str,
        consumer_actor_id: str,
        request_key: str,
        ttl_seconds: int = DEFAULT_GRANT_TTL_SECONDS,
    ) -> ExecutionGrant:
        """Owner-only: let ``consumer_actor_id`` admit one run of an exact member trial.

        The grant names the trial's material sha256 (which the owner must
        confirm), expires after ``ttl_seconds`` and is used up by one admission.
        Built-in trainers stay owner-only (``unsupported``).
        """
        return admissions.approve(
            self.context,
            actor,
            study_id,
            revision=revision,
            trial_id=trial_id,
            expected_material_sha256=expected_material_sha256,
            consumer_actor_id=consumer_actor_id,
            request_key=request_key,
            ttl_seconds=ttl_seconds,
        )

    def admit(
        self,
        actor: str,
        study_id: str,
        *,
        revision: int,
        admission_epoch: int,
        trial_id: str,
        request_key: str,
        approval_id: str | None = None,
        parent_run_id: str | None = None,
    ) -> Admission:
        """Admit one exact run attempt of a member trial, reserving its whole envelope.

        Requires the study open at exactly ``admission_epoch``, no active or
        unknown child run, and room for the envelope in every budget dimension.
        A retry names a ceased failed/cancelled/interrupted ``parent_run_id`` of
        the same trial. The earlier children, all ceased, are settled on the way
        (as ``reconcile`` would), keeping their worst-case charge. Built-in
        trainers are owner-only; a non-owner runs an external trainer with an
        owner's execution grant (``approval_id``).
        """
        return admissions.admit(
            self.context,
            actor,
            study_id,
            revision=revision,
            admission_epoch=admission_epoch,
            trial_id=trial_id,
            request_key=request_key,
            approval_id=approval_id,
            parent_run_id=parent_run_id,
        )

    # == candidates =======================================================================

    def select_candidate(
        self,
        actor: str,
        study_id: str,
        *,
        revision: int,
        trial_id: str,
        run_id: str,
        request_key: str,
        checkpoint_sha256: str | None = None,
    ) -> CandidateResult:
        """Retain a diagnostic candidate: one checkpoint of a completed member run.

        The study's policy picks the checkpoint (``selected`` / ``last`` /
        ``explicit``) from the run's verified evidence; the decision is always
        ``diagnostic``.
        """
        return selection.select_candidate(
            self.context,
            actor,
            study_id,
            revision=revision,
            trial_id=trial_id,
            run_id=run_id,
            request_key=request_key,
            checkpoint_sha256=checkpoint_sha256,
        )

    def candidate(self, actor: str, candidate_id: str) -> CandidateResult:
        """A retained candidate, re-verified against its run's current evidence."""
        return selection.candidate(self.context, actor, candidate_id)

    def candidates(
        self, actor: str, run_id: str, *, cursor: str | None = None, limit: int = MAX_LIST_PAGE
    ) -> CandidatePage:
        """References to the candidates retained for one run, in id order."""
        return selection.candidates(self.context, actor, run_id, cursor=cursor, limit=limit)


__all__ = ["StudyService"]
