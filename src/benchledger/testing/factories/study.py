# mypy: disable-error-code="no-untyped-call"
"""Factories for experiment studies: value objects, and rows the service would write.

Value-object factories return the real attrs objects (``Budget``,
``SelectionPolicy``, ``MaterialRef``, ``Material``, ``MetricDefinition``,
``Checkpoint``, ``RunEvidence``); every digest is the domain's own
(``SelectionPolicy.sha256``, ``material_sha256``, ``RunEvidence.sha256``,
``Candidate.sha256``).

Row factories write what ``StudyService`` writes, with ids made as it makes
them (``uuid4().hex``) and request digests computed by the function the
service uses (:func:`benchledger.domain.study.request_sha256`). Adding a
member, a reservation or a candidate advances its study the way the service
does (``revision``, ``membership_revision``, ``charged_*``), so the rows load
through ``StudyService.get``. Each factory
alone builds what it needs: ``CandidateRowFactory()`` makes a policy, an open
study with its owner, a material, a trial, a completed run with its settled
reservation, verified evidence, and the candidate the policy selects from it.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from factory.base import Factory
from factory.declarations import (
    LazyAttribute,
    LazyFunction,
    RelatedFactory,
    SelfAttribute,
    Sequence,
    SubFactory,
)
from sqlalchemy.orm import Session

from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.study import (
    CANDIDATE_DECISION,
    CANDIDATE_LIMITATIONS,
    DEFAULT_GRANT_TTL_SECONDS,
    TERMINAL_RUN_STATES,
    Budget,
    Candidate,
    Checkpoint,
    Material,
    MaterialRef,
    ReservationState,
    SelectionPolicy,
    TrainerKind,
    material_document,
    material_sha256,
    request_sha256,
    to_document,
)
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
    select_checkpoint,
)
from benchledger.domain.study_rules import (
    admission_request_sha256,
    admission_run_key,
    reservation_state_for,
)
from benchledger.models.study import (
    AccessRoleRow,
    AuditRow,
    CandidateRow,
    ExecutionGrantRow,
    MaterialRow,
    MetricDefinitionRow,
    OperationReceiptRow,
    ReservationRow,
    RunCapabilityRow,
    RunCheckpointRow,
    RunEvidenceRow,
    RunMetricRow,
    RunObservationRow,
    RunRow,
    StudyPolicyRow,
    StudyRow,
    TrialRow,
)
from benchledger.repositories.studies import StudyRepository, budget_of, study_view
from benchledger.repositories.study_adapters import run_view
from benchledger.testing.factories._binding import (
    LedgerModelFactory,
    _options,
    bound_session,
    factory_now,
)

#: The actor that owns the studies the factories make (an ``owner`` role row is made for it).
TEST_OWNER = "test-owner"
#: The actor execution grants are made for (an ``operator`` role row is made for it).
TEST_OPERATOR = "test-operator"

_TERMINAL = frozenset(state.value for state in TERMINAL_RUN_STATES)


def _uuid() -> str:
    return uuid.uuid4().hex


def _session_of(factory: type[Any]) -> Session:
    session = _options(factory).sqlalchemy_session
    assert isinstance(session, Session)
    return session


# == value objects =========================================================================


class BudgetFactory(Factory[Budget]):
    """Study limits: room for ten attempts of the default :class:`EnvelopeFactory`."""

    class Meta:
        model = Budget

    attempt_slots = 10
    admitted_wall_seconds = 36_000
    retained_bytes = 10 * 2**30
    peak_staging_bytes = 4 * 2**30


class EnvelopeFactory(BudgetFactory):
    """A material's resource envelope: what one run attempt may use (every dimension >= 1)."""

    attempt_slots = 1
    admitted_wall_seconds = 3_600
    retained_bytes = 2**30
    peak_staging_bytes = 2**28


class MetricDefinitionFactory(Factory[MetricDefinition]):
    """A metric an evaluator measures (``metric-0001``, ..., minimized)."""

    class Meta:
        model = MetricDefinition

    metric_id = Sequence(lambda n: f"metric-{n:04d}")
    name = Sequence(lambda n: f"Validation loss {n}")
    goal = "minimize"
    unit = ""


class SelectionPolicyFactory(Factory[SelectionPolicy]):
    """A ``selection_policy_v1`` naming ``metric`` (a new :class:`MetricDefinitionFactory`)."""

    class Meta:
        model = SelectionPolicy

    class Params:
        metric = SubFactory(MetricDefinitionFactory)

    metric_definition_sha256 = LazyAttribute(lambda o: o.metric.sha256)
    checkpoint_rule = "selected"
    required_capabilities = ()
    replicate_reduce = "individual"
    numerical_acceptance = "diagnostic"
    tie_break = "trial_id"


class MaterialFactory(Factory[Material]):
    """A recipe material as the catalog registers it; ``ref`` is ``material_sha256(...)``."""

    class Meta:
        model = Material

    class Params:
        recipe = Sequence(lambda n: {"learning_rate": 0.001, "seed": n})
        document = LazyAttribute(
            lambda o: material_document(
                o.recipe, o.envelope, o.trainer_id, TrainerKind(o.trainer_kind)
            )
        )

    trainer_id = "test-trainer"
    trainer_kind = "external"
    envelope = SubFactory(EnvelopeFactory)
    ref = LazyAttribute(
        lambda o: MaterialRef(
            material_sha256(o.recipe, o.envelope, o.trainer_id, TrainerKind(o.trainer_kind))
        )
    )
    recipe_json = LazyAttribute(lambda o: canonical_json(o.document["recipe"]))


class MaterialRefFactory(Factory[MaterialRef]):
    """A reference to ``material`` (a new :class:`MaterialFactory` material)."""

    class Meta:
        model = MaterialRef

    class Params:
        material = SubFactory(MaterialFactory)

    sha256 = SelfAttribute("material.sha256")


class CheckpointFactory(Factory[Checkpoint]):
    """One entry of a checkpoint index, with a unique sha256."""

    class Meta:
        model = Checkpoint

    sha256 = Sequence(lambda n: sha256_text(f"test-checkpoint-{n}"))
    step = Sequence(lambda n: (n + 1) * 100)
    selected = False


def _checkpoints(count: int) -> tuple[Checkpoint, ...]:
    return tuple(
        CheckpointFactory.build(step=(index + 1) * 100, selected=index == count - 1)
        for index in range(count)
    )


class RunEvidenceFactory(Factory[RunEvidence]):
    """Verified evidence of one run: ``metric`` observed at ``checkpoint_count`` checkpoints.

    The last checkpoint is the ``selected`` one; its value is the lowest.
    ``capabilities`` are declared required and produced.
    """

    class Meta:
        model = RunEvidence

    class Params:
        metric = SubFactory(MetricDefinitionFactory)
        material = SubFactory(MaterialRefFactory)
        checkpoint_count = 2
        capabilities = ()

    run_id = LazyFunction(_uuid)
    state = "verified"
    producer_material_sha256 = SelfAttribute("material.sha256")
    metric_definitions = LazyAttribute(lambda o: (o.metric,))
    checkpoints = LazyAttribute(lambda o: _checkpoints(o.checkpoint_count))
    observations = LazyAttribute(
        lambda o: tuple(
            Observation(checkpoint.sha256, o.metric.metric_id, "observed", 1.0 / (index + 1))
            for index, checkpoint in enumerate(o.checkpoints)
        )
    )
    coverage = LazyAttribute(lambda o: CapabilityCoverage(required=o.capabilities))
    evaluation_sha256 = Sequence(lambda n: sha256_text(f"test-evaluation-{n}"))


# == access, catalog and content-addressed rows ============================================


class AccessRoleRowFactory(LedgerModelFactory):
    """An actor's role (default ``viewer``); one row per actor (an existing one is kept)."""

    class Meta:
        model = AccessRoleRow
        sqlalchemy_get_or_create = ("actor_id",)

    actor_id = Sequence(lambda n: f"test-actor-{n:04d}")
    role = "viewer"
    granted_by = TEST_OWNER
    granted_at = LazyFunction(factory_now)


class StudyPolicyRowFactory(LedgerModelFactory):
    """A stored selection policy (canonical JSON by sha256); one row per digest."""

    class Meta:
        model = StudyPolicyRow
        sqlalchemy_get_or_create = ("sha256",)

    class Params:
        policy = SubFactory(SelectionPolicyFactory)

    sha256 = LazyAttribute(lambda o: o.policy.sha256)
    policy_json = LazyAttribute(lambda o: canonical_json(o.policy.to_document()))
    created_at = LazyFunction(factory_now)


class MaterialRowFactory(LedgerModelFactory):
    """A material in the default catalog, exactly as ``register_material`` stores it."""

    class Meta:
        model = MaterialRow
        sqlalchemy_get_or_create = ("sha256",)

    class Params:
        material = SubFactory(MaterialFactory)

    sha256 = SelfAttribute("material.sha256")
    trainer_id = SelfAttribute("material.trainer_id")
    trainer_kind = LazyAttribute(lambda o: str(o.material.trainer_kind))
    envelope_attempt_slots = SelfAttribute("material.envelope.attempt_slots")
    envelope_admitted_wall_seconds = SelfAttribute("material.envelope.admitted_wall_seconds")
    envelope_retained_bytes = SelfAttribute("material.envelope.retained_bytes")
    envelope_peak_staging_bytes = SelfAttribute("material.envelope.peak_staging_bytes")
    recipe_json = SelfAttribute("material.recipe_json")
    created_at = LazyFunction(factory_now)


class MetricDefinitionRowFactory(LedgerModelFactory):
    """A stored metric definition (canonical JSON by sha256); one row per digest."""

    class Meta:
        model = MetricDefinitionRow
        sqlalchemy_get_or_create = ("sha256",)

    class Params:
        definition = SubFactory(MetricDefinitionFactory)

    sha256 = LazyAttribute(lambda o: o.definition.sha256)
    metric_id = SelfAttribute("definition.metric_id")
    definition_json = LazyAttribute(lambda o: canonical_json(o.definition.to_document()))
    created_at = LazyFunction(factory_now)


# == studies and members ====================================================================


def _epoch(state: str) -> int:
    return {"draft": 0, "open": 1}.get(state, 2)


def _revision(state: str) -> int:
    # create, then open, then stop: each a new revision.
    return {"draft": 1, "open": 2}.get(state, 3)


class StudyRowFactory(LedgerModelFactory):
    """A study in ``state`` (default ``draft``), owned by :data:`TEST_OWNER`.

    Stores its ``policy`` first and gives its creator the ``owner`` role.
    ``admission_epoch``, ``revision`` and ``stop_receipt_id`` follow the state
    the way the service's moves leave them; nothing is charged yet (reservations
    made by :class:`ReservationRowFactory` add their envelopes).
    """

    class Meta:
        model = StudyRow

    class Params:
        policy = SubFactory(SelectionPolicyFactory)
        limits = SubFactory(BudgetFactory)
        policy_row = SubFactory(StudyPolicyRowFactory, policy=SelfAttribute("..policy"))
        owner = SubFactory(
            AccessRoleRowFactory, actor_id=SelfAttribute("..created_by"), role="owner"
        )

    id = LazyFunction(_uuid)
    name = Sequence(lambda n: f"Test study {n}")
    state = "draft"
    admission_epoch = LazyAttribute(lambda o: _epoch(o.state))
    revision = LazyAttribute(lambda o: _revision(o.state))
    membership_revision = 1
    policy_sha256 = SelfAttribute("policy_row.sha256")
    limit_attempt_slots = SelfAttribute("limits.attempt_slots")
    limit_admitted_wall_seconds = SelfAttribute("limits.admitted_wall_seconds")
    limit_retained_bytes = SelfAttribute("limits.retained_bytes")
    limit_peak_staging_bytes = SelfAttribute("limits.peak_staging_bytes")
    charged_attempt_slots = 0
    charged_admitted_wall_seconds = 0
    charged_retained_bytes = 0
    charged_peak_staging_bytes = 0
    stop_receipt_id = LazyAttribute(
        lambda o: _uuid() if o.state in ("stopping", "stopped") else None
    )
    created_by = TEST_OWNER
    created_at = LazyFunction(factory_now)
    updated_at = SelfAttribute("created_at")


def _advance(
    session: Session,
    study_id: str,
    now: float,
    *,
    membership_revision: int | None = None,
    charged: Budget | None = None,
) -> None:
    """A new study revision, made by the repository calls the service's write path makes."""
    repo = StudyRepository(session)
    study = repo.get(study_id)
    assert study is not None, f"study {study_id} is not in the session"
    repo.change(study, membership_revision=membership_revision, charged=charged)
    repo.advance(study, now)


class TrialRowFactory(LedgerModelFactory):
    """A member of ``study``: one catalog ``material`` and a ``replicate``.

    Joining advances the study (``membership_revision`` and ``revision``), as
    ``prepare_trial`` does.
    """

    class Meta:
        model = TrialRow

    class Params:
        study = SubFactory(StudyRowFactory)
        material = SubFactory(MaterialRowFactory)

    id = LazyFunction(_uuid)
    study_id = SelfAttribute("study.id")
    material_sha256 = SelfAttribute("material.sha256")
    replicate = 0
    membership_revision = LazyAttribute(lambda o: o.study.membership_revision + 1)
    created_at = LazyFunction(factory_now)

    @classmethod
    def _create(cls, model_class: type[Any], *args: Any, **kwargs: Any) -> Any:
        trial = super()._create(model_class, *args, **kwargs)
        _advance(
            _session_of(cls),
            trial.study_id,
            trial.created_at,
            membership_revision=trial.membership_revision,
        )
        return trial


# == admissions: a run and its reservation ====================================================


def _admit_sha256(o: Any) -> str:
    return admission_request_sha256(
        o.study.id,
        revision=o.admitted_at_revision,
        admission_epoch=o.study.admission_epoch,
        trial_id=o.trial.id,
        approval_id=o.approval_id,
        parent_run_id=o.parent_run_id,
    )


_RESERVATION_FACTORY = "benchledger.testing.factories.study.ReservationRowFactory"
_RUN_FACTORY = "benchledger.testing.factories.study.RunRowFactory"


class RunRowFactory(LedgerModelFactory):
    """A run attempt admitted for ``trial`` of an open ``study``, in ``state`` (``queued``).

    Its ``run_key`` and ``request_sha256`` are the admission's. Made alone, the
    run comes with its reservation (:class:`ReservationRowFactory`), as
    ``admit`` makes both. A terminal run has ceased custody unless told
    otherwise (``custody_ceased=False``).
    """

    class Meta:
        model = RunRow

    class Params:
        study = SubFactory(StudyRowFactory, state="open")
        material = SubFactory(MaterialRowFactory)
        trial = SubFactory(
            TrialRowFactory, study=SelfAttribute("..study"), material=SelfAttribute("..material")
        )
        request_key = Sequence(lambda n: f"test-admit-{n:06d}")
        # The revision the admission saw: after the trial joined.
        admitted_at_revision = LazyAttribute(lambda o: (o.trial, o.study.revision)[1])

    id = LazyFunction(_uuid)
    run_key = LazyAttribute(lambda o: admission_run_key(o.study.id, o.actor_id, o.request_key))
    request_sha256 = LazyAttribute(_admit_sha256)
    actor_id = SelfAttribute("study.created_by")
    study_id = SelfAttribute("study.id")
    trial_id = SelfAttribute("trial.id")
    material_sha256 = SelfAttribute("trial.material_sha256")
    parent_run_id = None
    approval_id = None
    state = "queued"
    custody_ceased = LazyAttribute(lambda o: o.state in _TERMINAL)
    created_at = LazyFunction(factory_now)
    updated_at = SelfAttribute("created_at")

    reservation = RelatedFactory(
        _RESERVATION_FACTORY,
        factory_related_name="run",
        study=SelfAttribute("..study"),
        material=SelfAttribute("..material"),
        trial=SelfAttribute("..trial"),
        request_key=SelfAttribute("..request_key"),
        admitted_at_revision=SelfAttribute("..admitted_at_revision"),
    )


def _next_position(study_id: str) -> int:
    session = bound_session()
    if session is None:
        return 1
    last = session.scalar(
        sa.select(sa.func.max(ReservationRow.position)).where(ReservationRow.study_id == study_id)
    )
    return int(last or 0) + 1


def _envelope(o: Any) -> Budget:
    """The envelope of the trial's material (``material``, else the catalog row)."""
    row = o.material
    if row is None or row.sha256 != o.trial.material_sha256:
        session = bound_session()
        row = None if session is None else session.get(MaterialRow, o.trial.material_sha256)
        if row is None:
            raise LookupError("the trial's material is not in the catalog: pass material=")
    return budget_of(row, "envelope_")


def _reservation_state(o: Any) -> str:
    if not o.reconciled:
        return ReservationState.RESERVED.value
    return reservation_state_for(run_view(o.run)).value


class ReservationRowFactory(LedgerModelFactory):
    """The conservative charge of one admitted ``run``: its material's whole envelope.

    ``state`` is ``reserved`` until ``reconciled`` (default: once the run left
    ``queued``), then what reconciliation makes of the run's state. Creating it
    charges the study (``charged_*`` += envelope) and advances its revision,
    as ``admit`` does. Made alone, it admits a new run for it.
    """

    class Meta:
        model = ReservationRow

    class Params:
        study = SubFactory(StudyRowFactory, state="open")
        material = SubFactory(MaterialRowFactory)
        trial = SubFactory(
            TrialRowFactory, study=SelfAttribute("..study"), material=SelfAttribute("..material")
        )
        admitted_at_revision = LazyAttribute(lambda o: (o.trial, o.study.revision)[1])
        run = SubFactory(
            _RUN_FACTORY,
            study=SelfAttribute("..study"),
            material=SelfAttribute("..material"),
            trial=SelfAttribute("..trial"),
            request_key=SelfAttribute("..request_key"),
            admitted_at_revision=SelfAttribute("..admitted_at_revision"),
            reservation=None,
        )
        reconciled = LazyAttribute(lambda o: o.run.state != "queued")

    id = LazyFunction(_uuid)
    study_id = SelfAttribute("study.id")
    position = LazyAttribute(lambda o: _next_position(o.study.id))
    admission_epoch = SelfAttribute("study.admission_epoch")
    request_key = Sequence(lambda n: f"test-admit-{n:06d}")
    actor_id = SelfAttribute("run.actor_id")
    trial_id = SelfAttribute("trial.id")
    parent_run_id = SelfAttribute("run.parent_run_id")
    run_id = SelfAttribute("run.id")
    request_sha256 = SelfAttribute("run.request_sha256")
    material_sha256 = SelfAttribute("trial.material_sha256")
    envelope_attempt_slots = LazyAttribute(lambda o: _envelope(o).attempt_slots)
    envelope_admitted_wall_seconds = LazyAttribute(lambda o: _envelope(o).admitted_wall_seconds)
    envelope_retained_bytes = LazyAttribute(lambda o: _envelope(o).retained_bytes)
    envelope_peak_staging_bytes = LazyAttribute(lambda o: _envelope(o).peak_staging_bytes)
    state = LazyAttribute(_reservation_state)
    created_at = SelfAttribute("run.created_at")
    updated_at = LazyFunction(factory_now)
    settled_at = LazyAttribute(lambda o: o.updated_at if o.state == "settled" else None)

    @classmethod
    def _create(cls, model_class: type[Any], *args: Any, **kwargs: Any) -> Any:
        reservation = super()._create(model_class, *args, **kwargs)
        session = _session_of(cls)
        study = session.get(StudyRow, reservation.study_id)
        assert study is not None
        charged = budget_of(study, "charged_").plus(budget_of(reservation, "envelope_"), "Charged")
        _advance(session, study.id, reservation.created_at, charged=charged)
        return reservation


# == evidence ===============================================================================


class RunEvidenceRowFactory(LedgerModelFactory):
    """A run's retained evidence (``evidence``, a :class:`RunEvidenceFactory` value), stored
    exactly as the default evidence store stores it: the evidence row, its metric
    definitions, checkpoint index, observations and capabilities.

    Made alone, it is the evidence of a new completed ``run`` of its trial's material.
    """

    class Meta:
        model = RunEvidenceRow

    class Params:
        run = SubFactory(RunRowFactory, state="completed")
        metric = SubFactory(MetricDefinitionFactory)
        evidence = SubFactory(
            RunEvidenceFactory,
            run_id=SelfAttribute("..run.id"),
            material=LazyAttribute(lambda o: MaterialRef(o.factory_parent.run.material_sha256)),
            metric=SelfAttribute("..metric"),
        )

    run_id = SelfAttribute("evidence.run_id")
    state = LazyAttribute(lambda o: str(o.evidence.state))
    producer_material_sha256 = SelfAttribute("evidence.producer_material_sha256")
    evaluation_sha256 = SelfAttribute("evidence.evaluation_sha256")
    evidence_sha256 = SelfAttribute("evidence.sha256")
    recorded_at = LazyFunction(factory_now)

    parts = RelatedFactory(
        "benchledger.testing.factories.study._EvidencePartsFactory",
        factory_related_name="evidence_row",
        evidence=SelfAttribute("..evidence"),
    )


class _EvidencePart(LedgerModelFactory):
    """Base of the rows of one retained evidence: the part at ``index`` of ``evidence``.

    Made alone, a part comes with its evidence record and every other part of
    it (``siblings``), so the stored evidence is whole and verifies.
    """

    class Meta:
        abstract = True

    class Params:
        index = 0
        run = SubFactory(RunRowFactory, state="completed")
        evidence = SubFactory(
            RunEvidenceFactory,
            run_id=SelfAttribute("..run.id"),
            material=LazyAttribute(lambda o: MaterialRef(o.factory_parent.run.material_sha256)),
        )
        evidence_row = SubFactory(
            RunEvidenceRowFactory,
            run=SelfAttribute("..run"),
            evidence=SelfAttribute("..evidence"),
            parts=None,
        )

    run_id = SelfAttribute("evidence_row.run_id")
    position = LazyAttribute(lambda o: o.index)

    siblings = RelatedFactory(
        "benchledger.testing.factories.study._EvidencePartsFactory",
        evidence=SelfAttribute("..evidence"),
        evidence_row=SelfAttribute("..evidence_row"),
        skip=LazyAttribute(lambda o: (o.factory_parent.kind, o.factory_parent.index)),
    )


class RunMetricRowFactory(_EvidencePart):
    """Evidence names a metric definition (stored too) at ``index``."""

    class Meta:
        model = RunMetricRow

    class Params:
        kind = "metric"
        definition = LazyAttribute(lambda o: o.evidence.metric_definitions[o.index])
        definition_row = SubFactory(
            MetricDefinitionRowFactory, definition=SelfAttribute("..definition")
        )

    definition_sha256 = SelfAttribute("definition_row.sha256")


class RunCheckpointRowFactory(_EvidencePart):
    """Entry ``index`` of the evidence's checkpoint index."""

    class Meta:
        model = RunCheckpointRow

    class Params:
        kind = "checkpoint"
        checkpoint = LazyAttribute(lambda o: o.evidence.checkpoints[o.index])

    checkpoint_sha256 = SelfAttribute("checkpoint.sha256")
    step = SelfAttribute("checkpoint.step")
    selected = SelfAttribute("checkpoint.selected")


class RunObservationRowFactory(_EvidencePart):
    """Observation ``index`` of the evidence."""

    class Meta:
        model = RunObservationRow

    class Params:
        kind = "observation"
        observation = LazyAttribute(lambda o: o.evidence.observations[o.index])

    checkpoint_sha256 = SelfAttribute("observation.checkpoint_sha256")
    metric_id = SelfAttribute("observation.metric_id")
    state = LazyAttribute(lambda o: str(o.observation.state))
    value = SelfAttribute("observation.value")


def _capabilities(evidence: RunEvidence) -> list[tuple[str, int, str]]:
    coverage = evidence.coverage
    return [
        (kind, index, name)
        for kind, names in (
            ("required", coverage.required),
            ("optional", coverage.optional),
            ("omitted", coverage.omitted),
        )
        for index, name in enumerate(names)
    ]


class RunCapabilityRowFactory(_EvidencePart):
    """Capability ``index`` of the evidence's coverage (required, optional, omitted order).

    Made alone, its evidence declares one required capability, ``validation``.
    """

    class Meta:
        model = RunCapabilityRow

    class Params:
        kind = "capability"
        evidence = SubFactory(
            RunEvidenceFactory,
            run_id=SelfAttribute("..run.id"),
            material=LazyAttribute(lambda o: MaterialRef(o.factory_parent.run.material_sha256)),
            capabilities=("validation",),
        )
        capability_entry = LazyAttribute(lambda o: _capabilities(o.evidence)[o.index])

    coverage = LazyAttribute(lambda o: o.capability_entry[0])
    position = LazyAttribute(lambda o: o.capability_entry[1])
    capability = LazyAttribute(lambda o: o.capability_entry[2])


_PARTS: tuple[tuple[str, str, Any], ...] = (
    ("metric", "RunMetricRowFactory", lambda e: len(e.metric_definitions)),
    ("checkpoint", "RunCheckpointRowFactory", lambda e: len(e.checkpoints)),
    ("observation", "RunObservationRowFactory", lambda e: len(e.observations)),
    ("capability", "RunCapabilityRowFactory", lambda e: len(_capabilities(e))),
)


class _EvidencePartsFactory(Factory[list[Any]]):
    """Every part of ``evidence`` as rows of ``evidence_row`` (but ``skip``: (kind, index))."""

    class Meta:
        model = list

    evidence = None
    evidence_row = None
    skip = None

    @classmethod
    def _parts(cls, strategy: str, **kwargs: Any) -> list[Any]:
        evidence: RunEvidence = kwargs["evidence"]
        rows: list[Any] = []
        for kind, name, count in _PARTS:
            factory = globals()[name]
            for index in range(count(evidence)):
                if kwargs["skip"] == (kind, index):
                    continue
                make = getattr(factory, strategy)
                rows.append(
                    make(
                        index=index,
                        run=None,
                        evidence=evidence,
                        evidence_row=kwargs["evidence_row"],
                        siblings=None,
                    )
                )
        return rows

    @classmethod
    def _build(cls, model_class: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return cls._parts("build", **kwargs)

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return cls._parts("create", **kwargs)


# == candidates, grants, receipts, audit ======================================================


def _candidate(o: Any) -> Candidate:
    checkpoint = select_checkpoint(o.evidence, o.policy, o.checkpoint_sha256_requested)
    evaluation = o.evidence.evaluation_sha256
    assert evaluation is not None, "a candidate needs evidence with an evaluation_sha256"
    return Candidate(
        id=o.id,
        study_id=o.study.id,
        trial_id=o.trial.id,
        run_id=o.run.id,
        checkpoint_sha256=checkpoint.sha256,
        evaluation_sha256=evaluation,
        policy_sha256=o.policy.sha256,
        decision=CANDIDATE_DECISION,
        limitations=CANDIDATE_LIMITATIONS,
    )


class CandidateRowFactory(LedgerModelFactory):
    """A retained diagnostic candidate, as ``select_candidate`` stores it.

    The checkpoint is the one the study's ``policy`` selects (with the domain's
    ``select_checkpoint``) from the run's verified ``evidence``; the stored
    ``candidate_sha256`` is ``Candidate.sha256``. Selecting advances the study.
    """

    class Meta:
        model = CandidateRow

    class Params:
        metric = SubFactory(MetricDefinitionFactory)
        policy = SubFactory(SelectionPolicyFactory, metric=SelfAttribute("..metric"))
        study = SubFactory(StudyRowFactory, state="open", policy=SelfAttribute("..policy"))
        material = SubFactory(MaterialRowFactory)
        trial = SubFactory(
            TrialRowFactory, study=SelfAttribute("..study"), material=SelfAttribute("..material")
        )
        run = SubFactory(
            RunRowFactory,
            state="completed",
            study=SelfAttribute("..study"),
            material=SelfAttribute("..material"),
            trial=SelfAttribute("..trial"),
        )
        evidence = SubFactory(
            RunEvidenceFactory,
            run_id=SelfAttribute("..run.id"),
            material=LazyAttribute(lambda o: MaterialRef(o.factory_parent.run.material_sha256)),
            metric=SelfAttribute("..metric"),
        )
        evidence_row = SubFactory(
            RunEvidenceRowFactory, run=SelfAttribute("..run"), evidence=SelfAttribute("..evidence")
        )
        checkpoint_sha256_requested = None
        candidate = LazyAttribute(_candidate)

    id = LazyFunction(_uuid)
    study_id = SelfAttribute("study.id")
    trial_id = SelfAttribute("trial.id")
    run_id = SelfAttribute("run.id")
    checkpoint_sha256 = SelfAttribute("candidate.checkpoint_sha256")
    evaluation_sha256 = SelfAttribute("candidate.evaluation_sha256")
    policy_sha256 = SelfAttribute("candidate.policy_sha256")
    decision = SelfAttribute("candidate.decision")
    limitations_json = LazyAttribute(lambda o: canonical_json(list(o.candidate.limitations)))
    candidate_sha256 = SelfAttribute("candidate.sha256")
    created_by = SelfAttribute("study.created_by")
    created_at = LazyFunction(factory_now)

    @classmethod
    def _create(cls, model_class: type[Any], *args: Any, **kwargs: Any) -> Any:
        row = super()._create(model_class, *args, **kwargs)
        _advance(_session_of(cls), row.study_id, row.created_at)
        return row


class ExecutionGrantRowFactory(LedgerModelFactory):
    """An owner's unused grant for :data:`TEST_OPERATOR` to admit one run of ``trial``.

    The consumer gets the ``operator`` role; the trial's material is external
    (built-in trainers take no grants).
    """

    class Meta:
        model = ExecutionGrantRow

    class Params:
        study = SubFactory(StudyRowFactory, state="open")
        trial = SubFactory(TrialRowFactory, study=SelfAttribute("..study"))
        consumer = SubFactory(
            AccessRoleRowFactory, actor_id=SelfAttribute("..consumer_actor_id"), role="operator"
        )
        ttl_seconds = DEFAULT_GRANT_TTL_SECONDS

    id = LazyFunction(_uuid)
    study_id = SelfAttribute("study.id")
    trial_id = SelfAttribute("trial.id")
    material_sha256 = SelfAttribute("trial.material_sha256")
    consumer_actor_id = TEST_OPERATOR
    granted_by = SelfAttribute("study.created_by")
    created_at = LazyFunction(factory_now)
    expires_at = LazyAttribute(lambda o: o.created_at + o.ttl_seconds)
    consumed_at = None
    consumed_run_id = None


class OperationReceiptRowFactory(LedgerModelFactory):
    """The receipt ``create`` keeps for its request key: replaying it returns ``study``.

    ``StudyService.create(TEST_OWNER, name=..., limits=..., policy=...,
    request_key=receipt.request_key)`` with the study's inputs replays this
    receipt (its digest is the service's:
    :func:`~benchledger.domain.study.request_sha256`).
    """

    class Meta:
        model = OperationReceiptRow

    class Params:
        policy = SubFactory(SelectionPolicyFactory)
        limits = SubFactory(BudgetFactory)
        study = SubFactory(
            StudyRowFactory, policy=SelfAttribute("..policy"), limits=SelfAttribute("..limits")
        )

    actor_id = SelfAttribute("study.created_by")
    operation = "studies.create"
    request_key = Sequence(lambda n: f"test-create-{n:06d}")
    request_sha256 = LazyAttribute(
        lambda o: request_sha256(
            "studies.create",
            None,
            {
                "name": o.study.name,
                "limits": o.limits.to_document(),
                "policy": o.policy.to_document(),
            },
        )
    )
    study_id = SelfAttribute("study.id")
    receipt_json = LazyAttribute(lambda o: canonical_json(to_document(study_view(o.study, ()))))
    created_at = SelfAttribute("study.created_at")


class AuditRowFactory(LedgerModelFactory):
    """An audit entry (append-only: the database refuses to change it once written)."""

    class Meta:
        model = AuditRow

    class Params:
        details = LazyAttribute(lambda o: {"revision": 1, "epoch": 0})

    action = "studies.create"
    subject_id = LazyFunction(_uuid)
    actor_id = TEST_OWNER
    details_json = LazyAttribute(lambda o: canonical_json(o.details))
    recorded_at = LazyFunction(factory_now)


__all__ = [
    "TEST_OPERATOR",
    "TEST_OWNER",
    "AccessRoleRowFactory",
    "AuditRowFactory",
    "BudgetFactory",
    "CandidateRowFactory",
    "CheckpointFactory",
    "EnvelopeFactory",
    "ExecutionGrantRowFactory",
    "MaterialFactory",
    "MaterialRefFactory",
    "MaterialRowFactory",
    "MetricDefinitionFactory",
    "MetricDefinitionRowFactory",
    "OperationReceiptRowFactory",
    "ReservationRowFactory",
    "RunCapabilityRowFactory",
    "RunCheckpointRowFactory",
    "RunEvidenceFactory",
    "RunEvidenceRowFactory",
    "RunMetricRowFactory",
    "RunObservationRowFactory",
    "RunRowFactory",
    "SelectionPolicyFactory",
    "StudyPolicyRowFactory",
    "StudyRowFactory",
    "TrialRowFactory",
]
