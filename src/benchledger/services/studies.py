"""StudyService: finite experiment studies with conservative admission accounting.

The seed's ``Experiments`` re-expressed over repositories. A study is a finite
:class:`~benchledger.domain.study.Budget` plus a content-addressed
:class:`~benchledger.domain.study.SelectionPolicy`; trials are immutable
members; ``admit`` reserves a run attempt's whole resource envelope;
``reconcile`` settles reservations from run state but keeps the worst-case
charge; ``stop`` / ``continue_study`` move admission epochs; and
``select_candidate`` retains a diagnostic checkpoint decision.

Every write

- takes the acting actor and is authorized (``forbidden`` otherwise);
- is one database transaction that first locks the study row;
- is idempotent per (actor, operation, request key): the key is bound to the
  sha256 of the request, a replay returns the identical receipt and the same
  key with other inputs is a ``conflict``;
- checks the study revision the caller last saw (``stale`` otherwise);
- appends to the audit log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.adapters.access import SqlAccessPolicy
from benchledger.adapters.evidence import SqlEvidenceStore
from benchledger.adapters.materials import SqlMaterialCatalog
from benchledger.adapters.runs import SqlRunRegistry
from benchledger.db import Database
from benchledger.domain.canonical import (
    CanonicalJsonError,
    canonical_json,
    parse_canonical_json,
    sha256_json,
)
from benchledger.domain.study import (
    CANDIDATE_DECISION,
    CANDIDATE_LIMITATIONS,
    DEFAULT_GRANT_TTL_SECONDS,
    MAX_GRANT_TTL_SECONDS,
    MAX_LIST_PAGE,
    MAX_MEMBERS,
    MAX_STUDY_PAGE,
    RETRY_PARENT_STATES,
    Admission,
    Budget,
    Candidate,
    CandidatePage,
    CandidateRef,
    CandidateResult,
    ExecutionGrant,
    Material,
    MaterialRef,
    PageInfo,
    Reservation,
    ReservationState,
    Run,
    RunRequest,
    RunState,
    SelectionPolicy,
    StopOutcome,
    StopReceipt,
    Study,
    StudyList,
    StudyPage,
    StudyState,
    TrainerKind,
    Trial,
    as_enum,
    boolean,
    describe,
    from_document,
    identifier,
    limits_budget,
    material_sha256,
    natural,
    page_limit,
    refuse,
    request_key,
    request_sha256,
    sha256_hex,
    text,
    to_document,
)
from benchledger.domain.study_evidence import (
    RunEvidence,
    select_checkpoint,
    validate_candidate_evidence,
)
from benchledger.domain.study_rules import (
    Role,
    check_run_receipt,
    child_custody,
    reconciled_state,
    reservation_state_for,
)
from benchledger.errors import StudyError
from benchledger.models.study import CandidateRow, ReservationRow, StudyRow, TrialRow
from benchledger.ports.study import AccessPolicy, EvidenceStore, MaterialCatalog, RunRegistry
from benchledger.repositories.studies import (
    StudyRepository,
    budget_columns,
    budget_of,
    reservation_view,
    study_view,
    summary_view,
    trial_view,
)

_T = TypeVar("_T")
_WRITE_ATTEMPTS = 3
#: PostgreSQL serialization failure and deadlock: safe to retry the whole transaction.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


def _policy_value(policy: object) -> SelectionPolicy:
    if not isinstance(policy, SelectionPolicy):
        raise refuse("Selection policy must be a SelectionPolicy.")
    return policy


def _material_ref(material: object) -> MaterialRef:
    if isinstance(material, Material):
        return material.ref
    if not isinstance(material, MaterialRef):
        raise refuse("Material must be a MaterialRef.")
    return material


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
        db.require_current_schema()
        self.db = db
        self.runs: RunRegistry = runs if runs is not None else SqlRunRegistry()
        self.materials: MaterialCatalog = (
            materials if materials is not None else SqlMaterialCatalog()
        )
        self.evidence: EvidenceStore = evidence if evidence is not None else SqlEvidenceStore()
        self.access: AccessPolicy = access if access is not None else SqlAccessPolicy()
        self.clock = clock

    # == access ===========================================================================

    def bootstrap_owner(self, actor: str) -> Role:
        """Make ``actor`` the first owner; refused (``forbidden``) once the ledger has one."""
        identifier(actor, "Actor id")

        def work(session: Session, now: float) -> Role:
            if self.access.owner_count(session) == 0:
                self.access.assign(session, actor, Role.OWNER, by=actor, now=now)
                StudyRepository(session).audit(
                    "access.bootstrap_owner", actor, actor, {"role": "owner"}, now
                )
                return Role.OWNER
            if self.access.role_of(session, actor) is Role.OWNER:
                return Role.OWNER
            raise refuse("The ledger already has an owner.", "forbidden")

        return self._transaction(work)

    def grant_role(self, actor: str, subject: str, role: Role | str) -> Role:
        """Owner-only: give ``subject`` a role (replacing any other)."""
        identifier(actor, "Actor id")
        identifier(subject, "Subject actor id")
        wanted = as_enum(Role, role, "role")

        def work(session: Session, now: float) -> Role:
            self._authorize(session, actor, "access.grant_role", None)
            self._keep_an_owner(session, subject, wanted)
            if self.access.role_of(session, subject) is wanted:
                return wanted  # granted already: a repeat writes nothing
            self.access.assign(session, subject, wanted, by=actor, now=now)
            StudyRepository(session).audit(
                "access.grant_role", subject, actor, {"role": wanted.value}, now
            )
            return wanted

        return self._transaction(work)

    def revoke_role(self, actor: str, subject: str) -> None:
        """Owner-only: remove ``subject``'s role; the last owner cannot be removed."""
        identifier(actor, "Actor id")
        identifier(subject, "Subject actor id")

        def work(session: Session, now: float) -> None:
            self._authorize(session, actor, "access.revoke_role", None)
            self._keep_an_owner(session, subject, None)
            if self.access.role_of(session, subject) is None:
                return  # no role to remove: a repeat writes nothing
            self.access.assign(session, subject, None, by=actor, now=now)
            StudyRepository(session).audit("access.revoke_role", subject, actor, {}, now)

        self._transaction(work)

    def role_of(self, actor: str) -> Role | None:
        """The actor's own role (no permission needed to learn it)."""
        identifier(actor, "Actor id")
        with self.db.read() as session:
            return self.access.role_of(session, actor)

    def _keep_an_owner(self, session: Session, subject: str, role: Role | None) -> None:
        if (
            role is not Role.OWNER
            and self.access.role_of(session, subject) is Role.OWNER
            and self.access.owner_count(session) <= 1
        ):
            raise refuse("The last owner cannot be removed.", "conflict")

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
        identifier(actor, "Actor id")
        if not isinstance(envelope, Budget):
            raise refuse("Material envelope must be a Budget.")
        envelope.require_positive("Material envelope")
        identifier(trainer_id, "Trainer id")
        kind = TrainerKind.BUILTIN if boolean(builtin, "Builtin") else TrainerKind.EXTERNAL
        ref = MaterialRef(material_sha256(recipe, envelope, trainer_id, kind))

        def work(session: Session, now: float) -> Material:
            self._authorize(session, actor, "studies.register_material", None)
            known = self._known_material(session, ref)
            material = self.materials.register(
                session,
                recipe=recipe,
                envelope=envelope,
                trainer_id=trainer_id,
                builtin=builtin,
                now=now,
            )
            if known is not None and known == material:
                return material  # registered before: nothing written
            StudyRepository(session).audit(
                "studies.register_material",
                material.sha256,
                actor,
                {
                    "trainer_id": material.trainer_id,
                    "trainer_kind": material.trainer_kind.value,
                    "envelope": material.envelope.to_document(),
                },
                now,
            )
            return material

        return self._transaction(work)

    def _known_material(self, session: Session, ref: MaterialRef) -> Material | None:
        try:
            return self.materials.load(session, ref)
        except StudyError:
            return None

    def report_run(
        self,
        actor: str,
        run_id: str,
        state: RunState | str,
        *,
        custody_ceased: bool | None = None,
    ) -> Run:
        """Report a run's new state to the run registry (a worker or supervisor)."""
        identifier(actor, "Actor id")
        identifier(run_id, "Run id")
        target = as_enum(RunState, state, "run state")

        if custody_ceased is not None:
            boolean(custody_ceased, "Custody ceased")

        def work(session: Session, now: float) -> Run:
            self._authorize(session, actor, "studies.report_run", None)
            before = self.runs.load(session, run_id)
            run = self.runs.transition(
                session, run_id, target, now=now, custody_ceased=custody_ceased
            )
            if run == before:
                return run  # a repeated report changes nothing: nothing written
            StudyRepository(session).audit(
                "studies.report_run",
                run_id,
                actor,
                {"state": run.state.value, "custody_ceased": run.custody_ceased},
                now,
            )
            return run

        return self._transaction(work)

    def run(self, actor: str, run_id: str) -> Run:
        """A run attempt a study admitted, as the run registry reports it now.

        The registry's answer is checked to be the very attempt its reservation
        admitted (same study, trial, actor, request, material and parent), else
        ``unavailable``; a run no study admitted is ``not_found``. Needs the
        ``inspect`` permission.
        """
        identifier(actor, "Actor id")
        identifier(run_id, "Run id")
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self._authorize(session, actor, "studies.run", None)
            reservation = repo.reservation_for_run(run_id)
            if reservation is None:
                raise refuse("Run not found.", "not_found")
            return self._run_of(session, reservation)

    def record_evidence(self, actor: str, evidence: RunEvidence) -> None:
        """Retain a run's model evidence (once; the same evidence again is a no-op)."""
        identifier(actor, "Actor id")
        if not isinstance(evidence, RunEvidence):
            raise refuse("Evidence must be a RunEvidence.")

        def work(session: Session, now: float) -> None:
            self._authorize(session, actor, "studies.record_evidence", None)
            self.runs.load(session, evidence.run_id)
            known = self.evidence.load(session, evidence.run_id)
            if known is not None and known.sha256 == evidence.sha256:
                return  # retained already: nothing written
            self.evidence.record(session, evidence, now=now)
            StudyRepository(session).audit(
                "studies.record_evidence",
                evidence.run_id,
                actor,
                {"evidence_sha256": evidence.sha256},
                now,
            )

        self._transaction(work)

    def run_evidence(self, actor: str, run_id: str) -> RunEvidence | None:
        """The model evidence retained for a run a study admitted (``None`` before any).

        The evidence store re-verifies its digest (``unavailable`` if it
        differs); a run no study admitted is ``not_found``. Needs the
        ``inspect`` permission.
        """
        identifier(actor, "Actor id")
        identifier(run_id, "Run id")
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self._authorize(session, actor, "studies.run_evidence", None)
            if repo.reservation_for_run(run_id) is None:
                raise refuse("Run not found.", "not_found")
            return self.evidence.load(session, run_id)

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
        operation = "studies.create"
        key = self._inputs(actor, request_key)
        text(name, "Study name")
        limits_budget(limits)
        _policy_value(policy)
        sha = request_sha256(
            operation,
            None,
            {"name": name, "limits": limits.to_document(), "policy": policy.to_document()},
        )

        def work(session: Session, now: float) -> Study:
            repo = StudyRepository(session)
            self._authorize(session, actor, operation, None)
            replay = self._replay(repo, actor, operation, key, sha, Study)
            if replay is not None:
                return replay
            study_id = uuid.uuid4().hex
            repo.store_policy(policy.sha256, policy.to_document(), now)
            row = StudyRow(
                id=study_id,
                name=name,
                state=StudyState.DRAFT.value,
                admission_epoch=0,
                revision=1,
                membership_revision=1,
                policy_sha256=policy.sha256,
                **budget_columns("limit_", limits),
                **budget_columns("charged_", Budget.zero()),
                stop_receipt_id=None,
                created_by=actor,
                created_at=now,
                updated_at=now,
            )
            repo.add(row)
            repo.audit(
                operation,
                study_id,
                actor,
                {
                    "policy_sha256": policy.sha256,
                    "limits": limits.to_document(),
                    "revision": 1,
                    "epoch": 0,
                },
                now,
            )
            study = study_view(row, ())
            self._receipt(repo, actor, operation, key, sha, study_id, study, now)
            return study

        return self._transaction(work)

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
        operation = "studies.save"
        key = self._inputs(actor, request_key, study_id, revision)
        text(name, "Study name")
        limits_budget(limits)
        _policy_value(policy)
        sha = request_sha256(
            operation,
            study_id,
            {
                "revision": revision,
                "name": name,
                "limits": limits.to_document(),
                "policy": policy.to_document(),
            },
        )

        def work(session: Session, now: float) -> Study:
            repo, row, replay = self._begin(session, actor, operation, study_id, key, sha, Study)
            if replay is not None:
                return replay
            self._expect(row, revision)
            charged = budget_of(row, "charged_")
            if not charged.fits_within(limits):
                raise refuse("Limits are below existing obligations.", "conflict")
            repo.store_policy(policy.sha256, policy.to_document(), now)
            row.name = name
            row.policy_sha256 = policy.sha256
            for column, value in budget_columns("limit_", limits).items():
                setattr(row, column, value)
            self._advance(
                repo,
                row,
                operation,
                actor,
                now,
                {"policy_sha256": policy.sha256, "limits": limits.to_document()},
            )
            study = self._study(repo, row)
            self._receipt(repo, actor, operation, key, sha, study_id, study, now)
            return study

        return self._transaction(work)

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
        identifier(actor, "Actor id")
        identifier(study_id, "Study id")
        natural(offset, "Page offset")
        page_limit(limit, MAX_STUDY_PAGE)
        if revision is not None:
            natural(revision, "Study revision", 1)
        if offset and revision is None:
            raise refuse("Later reservation pages require the study revision.")
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self._authorize(session, actor, "studies.get", study_id)
            row = self._existing(repo, study_id)
            if revision is not None and revision != row.revision:
                raise refuse("Study changed between pages.", "stale")
            return self._page(repo, row, offset, limit)

    def list(
        self, actor: str, *, cursor: str | None = None, limit: int = MAX_LIST_PAGE
    ) -> StudyList:
        """Study summaries in id order, ``limit`` at a time (``next_cursor`` continues)."""
        identifier(actor, "Actor id")
        page_limit(limit, MAX_LIST_PAGE)
        if cursor is not None:
            identifier(cursor, "Cursor")
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self._authorize(session, actor, "studies.list", None)
            rows = repo.page(cursor, limit + 1)
            shown = rows[:limit]
            counts = repo.trial_counts(row.id for row in shown)
            return StudyList(
                studies=tuple(summary_view(row, counts[row.id]) for row in shown),
                limit=limit,
                next_cursor=shown[-1].id if len(rows) > limit else None,
            )

    def policy(self, actor: str, sha256: str) -> SelectionPolicy:
        """A stored selection policy by its sha256."""
        identifier(actor, "Actor id")
        sha256_hex(sha256, "Policy sha256")
        with self.db.read() as session:
            self._authorize(session, actor, "studies.policy", None)
            return self._policy(StudyRepository(session), sha256)

    def trial(self, actor: str, trial_id: str) -> Trial:
        identifier(actor, "Actor id")
        identifier(trial_id, "Trial id")
        with self.db.read() as session:
            self._authorize(session, actor, "studies.trial", None)
            row = StudyRepository(session).trial(trial_id)
            if row is None:
                raise refuse("Trial not found.", "not_found")
            return trial_view(row)

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
        operation = "studies.prepare_trial"
        key = self._inputs(actor, request_key, study_id, revision)
        ref = _material_ref(material)
        natural(replicate, "Replicate")
        sha = request_sha256(
            operation,
            study_id,
            {"revision": revision, "material_sha256": ref.sha256, "replicate": replicate},
        )

        def work(session: Session, now: float) -> Trial:
            repo, row, replay = self._begin(session, actor, operation, study_id, key, sha, Trial)
            if replay is not None:
                return replay
            self._expect(row, revision)
            if row.membership_revision - 1 >= MAX_MEMBERS:
                raise refuse("Study membership is full.", "unavailable")
            self.materials.load(session, ref)
            if repo.trial_with_material(study_id, ref.sha256, replicate) is not None:
                raise refuse("Material/replicate already belongs to this study.", "conflict")
            member = TrialRow(
                id=uuid.uuid4().hex,
                study_id=study_id,
                material_sha256=ref.sha256,
                replicate=replicate,
                membership_revision=row.membership_revision + 1,
                created_at=now,
            )
            repo.add_trial(member)
            row.membership_revision += 1
            self._advance(repo, row, operation, actor, now, {"trial_id": member.id})
            trial = trial_view(member)
            self._receipt(repo, actor, operation, key, sha, study_id, trial, now)
            return trial

        return self._transaction(work)

    # == lifecycle ========================================================================

    def open_study(self, actor: str, study_id: str, *, revision: int, request_key: str) -> Study:
        """Owner-only: open a *draft* for admission (epoch 0 → 1).

        The seed opens a draft through ``continue_study`` at epoch 0; this is
        that move, refused (``conflict``) for a study that is not a draft.
        """
        return self._open(
            actor, study_id, revision=revision, epoch=None, key=request_key, first=True
        )

    def continue_study(
        self, actor: str, study_id: str, *, revision: int, admission_epoch: int, request_key: str
    ) -> Study:
        """Owner-only: open the next admission epoch.

        Requires the exact current epoch, every child run ceased (none active or
        of unknown custody), and remaining budget in every dimension.
        """
        natural(admission_epoch, "Admission epoch")
        return self._open(
            actor, study_id, revision=revision, epoch=admission_epoch, key=request_key, first=False
        )

    def _open(
        self,
        actor: str,
        study_id: str,
        *,
        revision: int,
        epoch: int | None,
        key: str,
        first: bool,
    ) -> Study:
        operation = "studies.open" if first else "studies.continue"
        key = self._inputs(actor, key, study_id, revision)
        body: dict[str, Any] = {"revision": revision}
        if epoch is not None:
            body["admission_epoch"] = epoch
        sha = request_sha256(operation, study_id, body)

        def work(session: Session, now: float) -> Study:
            repo, row, replay = self._begin(session, actor, operation, study_id, key, sha, Study)
            if replay is not None:
                return replay
            self._expect(row, revision)
            if first and row.state != StudyState.DRAFT:
                raise refuse("Only a draft study can be opened; use continue_study.", "conflict")
            expected = row.admission_epoch if epoch is None else epoch
            custody = child_custody(self._child_runs(session, repo, study_id))
            if (
                row.state == StudyState.OPEN
                or row.admission_epoch != expected
                or not custody.ceased
                or custody.unknown
            ):
                raise refuse(
                    "Study cannot open before known child cessation and exact epoch.",
                    "unavailable",
                )
            if budget_of(row, "charged_").reaches_any(budget_of(row, "limit_")):
                raise refuse("Study has no remaining budget.", "unavailable")
            if self.runs.custody_blocked(session):
                raise refuse("Run custody is unknown.", "unavailable")
            row.state = StudyState.OPEN.value
            row.admission_epoch += 1
            self._advance(repo, row, operation, actor, now, {})
            study = self._study(repo, row)
            self._receipt(repo, actor, operation, key, sha, study_id, study, now)
            return study

        return self._transaction(work)

    def stop(self, actor: str, study_id: str, *, revision: int, request_key: str) -> StopOutcome:
        """Close the admission epoch, then cancel the runs that have not ceased.

        The receipt (the closed epoch and the pending runs) is committed before
        any cancel is sent; a replay returns it unchanged, re-sends the cancels
        (harmless) and reports the study's current status.
        """
        operation = "studies.stop"
        key = self._inputs(actor, request_key, study_id, revision)
        sha = request_sha256(operation, study_id, {"revision": revision})

        def close(session: Session, now: float) -> StopReceipt:
            repo, row, replay = self._begin(
                session, actor, operation, study_id, key, sha, StopReceipt
            )
            if replay is not None:
                return replay
            self._expect(row, revision)
            row.state = StudyState.STOPPING.value
            row.admission_epoch += 1
            row.stop_receipt_id = uuid.uuid4().hex
            pending = tuple(
                run.id for run in self._child_runs(session, repo, study_id) if not run.ceased
            )
            self._advance(
                repo, row, operation, actor, now, {"stop_receipt_id": row.stop_receipt_id}
            )
            receipt = StopReceipt(
                study_id=study_id,
                stop_receipt_id=row.stop_receipt_id,
                admission_epoch=row.admission_epoch,
                run_ids=pending,
            )
            self._receipt(repo, actor, operation, key, sha, study_id, receipt, now)
            return receipt

        receipt = self._transaction(close)

        def cancel(session: Session, now: float) -> StudyPage:
            repo = StudyRepository(session)
            self._authorize(session, actor, operation, study_id)
            row = self._locked(repo, study_id)
            for run_id in receipt.run_ids:
                before = self.runs.load(session, run_id)
                if not before.active:
                    continue
                after = self.runs.cancel(session, run_id, now=now)
                if after == before:
                    continue  # already asked to stop (a replay): nothing written
                repo.audit(
                    "studies.cancel_run",
                    run_id,
                    actor,
                    {"study_id": study_id, "from": before.state.value, "to": after.state.value},
                    now,
                )
            return self._reconcile(session, repo, row, actor, now)

        return StopOutcome(receipt=receipt, status=self._transaction(cancel))

    def reconcile(self, actor: str, study_id: str) -> StudyPage:
        """Settle reservations from run state; close admission when custody is unknown.

        A convergent observation with no inputs but the study: repeating it
        changes nothing more, so it takes no request key or revision.
        """
        identifier(actor, "Actor id")
        identifier(study_id, "Study id")

        def work(session: Session, now: float) -> StudyPage:
            repo = StudyRepository(session)
            self._authorize(session, actor, "studies.reconcile", study_id)
            row = self._locked(repo, study_id)
            return self._reconcile(session, repo, row, actor, now)

        return self._transaction(work)

    def _reconcile(
        self, session: Session, repo: StudyRepository, row: StudyRow, actor: str, now: float
    ) -> StudyPage:
        children = self._children(session, repo, row.id)
        changes = self._observe(children, now)
        move = reconciled_state(StudyState(row.state), child_custody(run for _, run in children))
        if move is not None:
            row.state = move.state.value
            if move.close_epoch:
                row.admission_epoch += 1
        if changes or move is not None:
            self._advance(repo, row, "studies.reconcile", actor, now, {"reservations": changes})
        return self._page(repo, row, 0, MAX_STUDY_PAGE)

    @staticmethod
    def _observe(children: Sequence[tuple[ReservationRow, Run]], now: float) -> dict[str, str]:
        """Move each reservation to the state its run implies; the changed ones, by id."""
        changes: dict[str, str] = {}
        for reservation, run in children:
            state = reservation_state_for(run)
            if state.value != reservation.state:
                reservation.state = state.value
                reservation.updated_at = now
                # Keep the worst-case charge: settling never gives budget back.
                reservation.settled_at = now if state is ReservationState.SETTLED else None
                changes[reservation.id] = state.value
        return changes

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
        operation = "studies.approve"
        key = self._inputs(actor, request_key, study_id, revision)
        identifier(trial_id, "Trial id")
        identifier(consumer_actor_id, "Consumer actor id")
        sha256_hex(expected_material_sha256, "Expected material sha256")
        natural(ttl_seconds, "Grant TTL seconds", 1, MAX_GRANT_TTL_SECONDS)
        sha = request_sha256(
            operation,
            study_id,
            {
                "revision": revision,
                "trial_id": trial_id,
                "expected_material_sha256": expected_material_sha256,
                "consumer_actor_id": consumer_actor_id,
                "ttl_seconds": ttl_seconds,
            },
        )

        def work(session: Session, now: float) -> ExecutionGrant:
            repo, row, replay = self._begin(
                session, actor, operation, study_id, key, sha, ExecutionGrant
            )
            if replay is not None:
                return replay
            self._expect(row, revision)
            trial = self._member(repo, study_id, trial_id, "Approve an exact member trial.")
            if expected_material_sha256 != trial.material_sha256:
                raise refuse("Composed material differs. Review the exact trial.", "stale")
            material = self.materials.load(session, MaterialRef(trial.material_sha256))
            if material.builtin:
                raise refuse(
                    "Built-in trainer execution remains owner-only; "
                    "no delegated execution grant applies.",
                    "unsupported",
                )
            grant = self.access.grant_execution(
                session,
                study_id=study_id,
                trial_id=trial.id,
                material_sha256=trial.material_sha256,
                consumer_actor_id=consumer_actor_id,
                granted_by=actor,
                ttl_seconds=ttl_seconds,
                now=now,
            )
            repo.audit(
                operation,
                study_id,
                actor,
                {
                    "trial_id": trial.id,
                    "material_sha256": trial.material_sha256,
                    "approval_id": grant.id,
                    "consumer_actor_id": consumer_actor_id,
                    "created_at": grant.created_at,
                    "expires_at": grant.expires_at,
                },
                now,
            )
            self._receipt(repo, actor, operation, key, sha, study_id, grant, now)
            return grant

        return self._transaction(work)

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
        operation = "studies.admit"
        key = self._inputs(actor, request_key, study_id, revision)
        natural(admission_epoch, "Admission epoch")
        identifier(trial_id, "Trial id")
        if approval_id is not None:
            identifier(approval_id, "Approval id")
        if parent_run_id is not None:
            identifier(parent_run_id, "Parent run id")
        sha = request_sha256(
            operation,
            study_id,
            {
                "revision": revision,
                "admission_epoch": admission_epoch,
                "trial_id": trial_id,
                "approval_id": approval_id,
                "parent_run_id": parent_run_id,
            },
        )

        def work(session: Session, now: float) -> Admission:
            repo, row, replay = self._begin(
                session, actor, operation, study_id, key, sha, Admission
            )
            if replay is not None:
                return replay
            if repo.reservation_for_request(study_id, key) is not None:
                raise refuse("Admission key is bound to different actor/inputs.", "conflict")
            self._expect(row, revision)
            trial = self._member(repo, study_id, trial_id, "Trial is not a member of this study.")
            material = self.materials.load(session, MaterialRef(trial.material_sha256))
            if material.builtin:
                self._authorize(session, actor, "studies.admit_builtin", study_id)
            if row.state != StudyState.OPEN or row.admission_epoch != admission_epoch:
                raise refuse("Study admission epoch is closed.", "stale")
            children = self._children(session, repo, study_id)
            custody = child_custody(run for _, run in children)
            if not custody.ceased or custody.unknown:
                raise refuse("Study already has an active or unknown child.", "unavailable")
            envelope = material.envelope
            total = budget_of(row, "charged_").plus(envelope, "Requested total")
            if not total.fits_within(budget_of(row, "limit_")):
                raise refuse("Finite study budget is exhausted.", "unavailable")
            if parent_run_id is not None:
                self._check_parent(session, repo, trial.id, parent_run_id)
            # Every earlier child has ceased: settle them now, as reconcile would, so the
            # next admission finds only this one unsettled (cost does not grow with history).
            settled = self._observe(children, now)
            run_id = uuid.uuid4().hex
            if material.builtin:
                if approval_id is not None:
                    raise refuse(
                        "Built-in owner admission does not consume delegated external grants."
                    )
            elif approval_id is not None:
                self.access.consume_execution(
                    session,
                    approval_id,
                    study_id=study_id,
                    trial_id=trial.id,
                    consumer_actor_id=actor,
                    material_sha256=trial.material_sha256,
                    run_id=run_id,
                    now=now,
                )
            elif self.access.role_of(session, actor) is not Role.OWNER:
                raise refuse(
                    "External execution by a non-owner requires an execution grant.", "forbidden"
                )
            run = self.runs.admit(
                session,
                RunRequest(
                    run_id=run_id,
                    run_key="study-"
                    + sha256_json(
                        {
                            "study_id": study_id,
                            "actor_id": actor,
                            "request_key": key,
                            "operation_id": operation,
                        }
                    ),
                    request_sha256=sha,
                    actor_id=actor,
                    study_id=study_id,
                    trial_id=trial.id,
                    material_sha256=trial.material_sha256,
                    parent_run_id=parent_run_id,
                    approval_id=approval_id,
                ),
                now=now,
            )
            reservation_row = ReservationRow(
                id=uuid.uuid4().hex,
                study_id=study_id,
                position=repo.last_position(study_id) + 1,
                admission_epoch=row.admission_epoch,
                request_key=key,
                actor_id=actor,
                trial_id=trial.id,
                parent_run_id=parent_run_id,
                run_id=run.id,
                request_sha256=sha,
                material_sha256=trial.material_sha256,
                **budget_columns("envelope_", envelope),
                state=ReservationState.RESERVED.value,
                created_at=now,
                updated_at=now,
                settled_at=None,
            )
            repo.add_reservation(reservation_row)
            for column, value in budget_columns("charged_", total).items():
                setattr(row, column, value)
            self._advance(
                repo,
                row,
                operation,
                actor,
                now,
                {
                    "run_id": run.id,
                    "reservation_id": reservation_row.id,
                    "request_sha256": sha,
                    "reservations": settled,
                },
            )
            admission = Admission(reservation=reservation_view(reservation_row), run=run)
            self._receipt(repo, actor, operation, key, sha, study_id, admission, now)
            return admission

        return self._transaction(work)

    def _check_parent(
        self, session: Session, repo: StudyRepository, trial_id: str, parent_run_id: str
    ) -> None:
        reservation = repo.reservation_for_run(parent_run_id)
        if reservation is None or reservation.trial_id != trial_id:
            raise refuse("Retry parent does not belong to this trial.")
        parent = self._run_of(session, reservation)
        if parent.state not in RETRY_PARENT_STATES or not parent.ceased:
            raise refuse("Retry requires a ceased failed/cancelled/interrupted parent.")

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
        operation = "studies.select_candidate"
        key = self._inputs(actor, request_key, study_id, revision)
        identifier(trial_id, "Trial id")
        identifier(run_id, "Run id")
        if checkpoint_sha256 is not None:
            sha256_hex(checkpoint_sha256, "Checkpoint sha256")
        sha = request_sha256(
            operation,
            study_id,
            {
                "revision": revision,
                "trial_id": trial_id,
                "run_id": run_id,
                "checkpoint_sha256": checkpoint_sha256,
            },
        )

        def work(session: Session, now: float) -> CandidateResult:
            repo, row, replay = self._begin(
                session, actor, operation, study_id, key, sha, CandidateResult
            )
            if replay is not None:
                return replay
            self._expect(row, revision)
            policy = self._policy(repo, row.policy_sha256)
            trial = repo.trial(trial_id)
            if trial is None:
                raise refuse("Trial not found.", "not_found")
            if trial.study_id != study_id:
                raise refuse("Trial belongs to another study.")
            reservation = repo.reservation_for_run(run_id)
            if reservation is None or reservation.trial_id != trial.id:
                raise refuse("Run does not belong to the selected trial.")
            evidence = validate_candidate_evidence(
                self.evidence.load(session, run_id), trial.material_sha256
            )
            checkpoint = select_checkpoint(evidence, policy, checkpoint_sha256)
            run = self._run_of(session, reservation)
            if run.state is not RunState.COMPLETED:
                raise refuse("Candidate Run is not completed.", "conflict")
            if evidence.evaluation_sha256 is None:
                raise refuse("Candidate evaluation artifact is unavailable.", "unavailable")
            candidate = Candidate(
                id=uuid.uuid4().hex,
                study_id=study_id,
                trial_id=trial.id,
                run_id=run_id,
                checkpoint_sha256=checkpoint.sha256,
                evaluation_sha256=evidence.evaluation_sha256,
                policy_sha256=row.policy_sha256,
                decision=CANDIDATE_DECISION,
                limitations=CANDIDATE_LIMITATIONS,
            )
            repo.add_candidate(
                CandidateRow(
                    id=candidate.id,
                    study_id=study_id,
                    trial_id=trial.id,
                    run_id=run_id,
                    checkpoint_sha256=candidate.checkpoint_sha256,
                    evaluation_sha256=candidate.evaluation_sha256,
                    policy_sha256=candidate.policy_sha256,
                    decision=candidate.decision,
                    limitations_json=canonical_json(list(candidate.limitations)),
                    candidate_sha256=candidate.sha256,
                    created_by=actor,
                    created_at=now,
                )
            )
            repo.audit(
                operation,
                candidate.id,
                actor,
                {
                    "study_id": study_id,
                    "run_id": run_id,
                    "checkpoint_sha256": checkpoint.sha256,
                    "decision": candidate.decision,
                },
                now,
            )
            self._advance(
                repo, row, "studies.candidate_selected", actor, now, {"candidate_id": candidate.id}
            )
            result = CandidateResult(
                ref=CandidateRef(candidate.id, candidate.sha256),
                candidate=candidate,
                run_id=run_id,
                checkpoint=checkpoint,
            )
            self._receipt(repo, actor, operation, key, sha, study_id, result, now)
            return result

        return self._transaction(work)

    def candidate(self, actor: str, candidate_id: str) -> CandidateResult:
        """A retained candidate, re-verified against its run's current evidence."""
        identifier(actor, "Actor id")
        identifier(candidate_id, "Candidate id")
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self._authorize(session, actor, "studies.candidate", None)
            row = repo.candidate(candidate_id)
            if row is None:
                raise refuse("Candidate not found.", "not_found")
            return self._verified_candidate(session, repo, row)

    def candidates(
        self, actor: str, run_id: str, *, cursor: str | None = None, limit: int = MAX_LIST_PAGE
    ) -> CandidatePage:
        """References to the candidates retained for one run, in id order."""
        identifier(actor, "Actor id")
        identifier(run_id, "Run id")
        page_limit(limit, MAX_LIST_PAGE)
        if cursor is not None:
            identifier(cursor, "Cursor")
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self._authorize(session, actor, "studies.candidates", None)
            self.runs.load(session, run_id)
            ids = repo.candidate_ids_for_run(run_id, cursor, limit + 1)
            refs = []
            for candidate_id in ids[:limit]:
                row = repo.candidate(candidate_id)
                if row is None or row.run_id != run_id:
                    raise refuse("Candidate Run association differs.", "unavailable")
                refs.append(self._verified_candidate(session, repo, row).ref)
            return CandidatePage(
                run_id=run_id,
                candidates=tuple(refs),
                limit=limit,
                next_cursor=ids[limit - 1] if len(ids) > limit else None,
            )

    def _verified_candidate(
        self, session: Session, repo: StudyRepository, row: CandidateRow
    ) -> CandidateResult:
        policy = self._policy(repo, row.policy_sha256)
        trial = repo.trial(row.trial_id)
        reservation = repo.reservation_for_run(row.run_id)
        if (
            trial is None
            or trial.study_id != row.study_id
            or reservation is None
            or reservation.trial_id != trial.id
        ):
            raise refuse("Candidate Run association differs.", "unavailable")
        self._run_of(session, reservation)
        evidence = validate_candidate_evidence(
            self.evidence.load(session, row.run_id), trial.material_sha256
        )
        checkpoint = select_checkpoint(evidence, policy, row.checkpoint_sha256)
        if evidence.evaluation_sha256 != row.evaluation_sha256:
            raise refuse("Candidate evaluation identity differs.", "unavailable")
        candidate = Candidate(
            id=row.id,
            study_id=row.study_id,
            trial_id=row.trial_id,
            run_id=row.run_id,
            checkpoint_sha256=row.checkpoint_sha256,
            evaluation_sha256=row.evaluation_sha256,
            policy_sha256=row.policy_sha256,
            decision=row.decision,
            limitations=tuple(_parse_json_list(row.limitations_json)),
        )
        if candidate.sha256 != row.candidate_sha256:
            raise refuse("Stored candidate identity differs.", "unavailable")
        return CandidateResult(
            ref=CandidateRef(candidate.id, candidate.sha256),
            candidate=candidate,
            run_id=row.run_id,
            checkpoint=checkpoint,
        )

    # == plumbing =========================================================================

    def _now(self) -> float:
        now = self.clock()
        if type(now) not in (int, float) or not 0 <= now < float("inf"):
            raise refuse("The clock must return finite, non-negative epoch seconds.")
        return float(now)

    def _transaction(self, work: Callable[[Session, float], _T]) -> _T:
        """Run ``work`` in one write transaction; retry only lost races (then replay)."""
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                with self.db.write() as session:
                    return work(session, self._now())
            except sa.exc.IntegrityError:
                # A concurrent writer inserted the same receipt or content first.
                if attempt + 1 == _WRITE_ATTEMPTS:
                    raise refuse("Concurrent writes collided; retry.", "conflict") from None
            except sa.exc.OperationalError as error:
                sqlstate = getattr(error.orig, "sqlstate", None)
                if sqlstate not in _RETRYABLE_SQLSTATES or attempt + 1 == _WRITE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _inputs(
        self, actor: str, key: str, study_id: str | None = None, revision: int | None = None
    ) -> str:
        identifier(actor, "Actor id")
        if study_id is not None:
            identifier(study_id, "Study id")
            natural(revision, "Study revision", 1)
        return request_key(key)

    def _authorize(
        self, session: Session, actor: str, operation: str, study_id: str | None
    ) -> Role:
        return self.access.require(session, actor, operation, study_id=study_id)

    def _begin(
        self,
        session: Session,
        actor: str,
        operation: str,
        study_id: str,
        key: str,
        sha: str,
        kind: type[_T],
    ) -> tuple[StudyRepository, StudyRow, _T | None]:
        """Authorize, lock the study, and find a prior receipt for this request key."""
        repo = StudyRepository(session)
        self._authorize(session, actor, operation, study_id)
        row = self._locked(repo, study_id)
        return repo, row, self._replay(repo, actor, operation, key, sha, kind)

    @staticmethod
    def _locked(repo: StudyRepository, study_id: str) -> StudyRow:
        row = repo.lock(study_id)
        if row is None:
            raise refuse("Study not found.", "not_found")
        return row

    @staticmethod
    def _existing(repo: StudyRepository, study_id: str) -> StudyRow:
        row = repo.get(study_id)
        if row is None:
            raise refuse("Study not found.", "not_found")
        return row

    @staticmethod
    def _expect(row: StudyRow, revision: int) -> None:
        if row.revision != revision:
            raise refuse("Study changed. Reload.", "stale")

    @staticmethod
    def _replay(
        repo: StudyRepository, actor: str, operation: str, key: str, sha: str, kind: type[_T]
    ) -> _T | None:
        row = repo.receipt(actor, operation, key)
        if row is None:
            return None
        if row.request_sha256 != sha:
            raise refuse("Request key is bound to different inputs.", "conflict")
        try:
            document = parse_canonical_json(row.receipt_json)
        except CanonicalJsonError:
            raise refuse("Stored receipt is not canonical JSON.", "unavailable") from None
        return from_document(kind, document)

    @staticmethod
    def _receipt(
        repo: StudyRepository,
        actor: str,
        operation: str,
        key: str,
        sha: str,
        study_id: str | None,
        value: object,
        now: float,
    ) -> None:
        repo.add_receipt(
            actor_id=actor,
            operation=operation,
            key=key,
            request_sha256=sha,
            study_id=study_id,
            document=to_document(value),
            now=now,
        )

    @staticmethod
    def _advance(
        repo: StudyRepository,
        row: StudyRow,
        action: str,
        actor: str,
        now: float,
        details: Mapping[str, Any],
    ) -> None:
        """A new study revision, audited with its epoch."""
        row.revision += 1
        row.updated_at = now
        repo.flush()
        repo.audit(
            action,
            row.id,
            actor,
            {**details, "revision": row.revision, "epoch": row.admission_epoch},
            now,
        )

    @staticmethod
    def _study(repo: StudyRepository, row: StudyRow) -> Study:
        return study_view(row, repo.trial_ids(row.id))

    @staticmethod
    def _policy(repo: StudyRepository, sha256: str) -> SelectionPolicy:
        stored = repo.policy_json(sha256)
        if stored is None:
            raise refuse("Selection policy not found.", "not_found")
        try:
            policy = SelectionPolicy.from_document(parse_canonical_json(stored))
        except (CanonicalJsonError, StudyError):
            raise refuse("Stored selection policy differs.", "unavailable") from None
        if policy.sha256 != sha256:
            raise refuse("Selection policy identity differs.", "unavailable")
        return policy

    @staticmethod
    def _member(repo: StudyRepository, study_id: str, trial_id: str, message: str) -> TrialRow:
        trial = repo.trial(trial_id)
        if trial is None:
            raise refuse("Trial not found.", "not_found")
        if trial.study_id != study_id:
            raise refuse(message)
        return trial

    def _run_of(self, session: Session, reservation: ReservationRow) -> Run:
        """The reservation's run from the registry, checked to be the attempt it admitted."""
        return check_run_receipt(
            reservation_view(reservation), self.runs.load(session, reservation.run_id)
        )

    def _children(
        self, session: Session, repo: StudyRepository, study_id: str
    ) -> Sequence[tuple[ReservationRow, Run]]:
        """The unsettled reservations with their (checked) runs.

        Settled reservations are of ceased runs, which never change again.
        """
        return [
            (reservation, self._run_of(session, reservation))
            for reservation in repo.unsettled(study_id)
        ]

    def _child_runs(self, session: Session, repo: StudyRepository, study_id: str) -> Sequence[Run]:
        return [run for _, run in self._children(session, repo, study_id)]

    @staticmethod
    def _page(repo: StudyRepository, row: StudyRow, offset: int, limit: int) -> StudyPage:
        total = repo.reservation_count(row.id)
        rows = repo.reservations(row.id, offset, limit)
        end = min(offset + limit, total)
        reservations: tuple[Reservation, ...] = tuple(reservation_view(item) for item in rows)
        return StudyPage(
            study=study_view(row, repo.trial_ids(row.id)),
            reservations=reservations,
            charged=budget_of(row, "charged_"),
            page=PageInfo(
                offset=offset,
                limit=limit,
                total=total,
                study_revision=row.revision,
                next_offset=end if end < total else None,
            ),
        )


def _parse_json_list(text_value: str) -> Sequence[str]:
    value = parse_canonical_json(text_value)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise refuse("Stored candidate limitations differ.", "unavailable")
    return value


__all__ = ["StudyService"]
