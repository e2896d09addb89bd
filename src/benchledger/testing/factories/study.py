# mypy: disable-error-code="no-untyped-call"
"""Factories of the rows of a study, as the service writes them: access roles, the
content-addressed catalog (policies, materials, metric definitions), studies,
members, admitted runs with their reservations, execution grants, receipts, audit.

Ids are made as the service makes them (``uuid4().hex``) and request digests
by the function the service uses (:func:`benchledger.domain.study.request_sha256`).
Adding a member or a reservation advances its study the way the service does
(``revision``, ``membership_revision``, ``charged_*``), so the rows load through
``StudyService.get``. Each factory alone builds what it needs. The value objects
are in :mod:`.study_values`, the evidence and candidate rows in :mod:`.study_evidence`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from factory.declarations import (
    LazyAttribute,
    LazyFunction,
    RelatedFactory,
    SelfAttribute,
    Sequence,
    SubFactory,
)
from sqlalchemy.orm import Session

from benchledger.domain.canonical import canonical_json
from benchledger.domain.study import (
    DEFAULT_GRANT_TTL_SECONDS,
    TERMINAL_RUN_STATES,
    Budget,
    ReservationState,
    request_sha256,
)
from benchledger.domain.study_documents import to_document
from benchledger.domain.study_rules import (
    admission_request_sha256,
    admission_run_key,
    reservation_state_for,
)
from benchledger.models.study import (
    AccessRoleRow,
    AuditRow,
    ExecutionGrantRow,
    MaterialRow,
    MetricDefinitionRow,
    OperationReceiptRow,
    ReservationRow,
    RunRow,
    StudyPolicyRow,
    StudyRow,
    TrialRow,
)
from benchledger.repositories.studies import StudyRepository
from benchledger.repositories.study_adapters import run_view
from benchledger.repositories.study_records import budget_of, study_view
from benchledger.testing.factories._binding import (
    LedgerModelFactory,
    _options,
    bound_session,
    factory_now,
)
from benchledger.testing.factories.study_values import (
    BudgetFactory,
    MaterialFactory,
    MetricDefinitionFactory,
    SelectionPolicyFactory,
    new_id,
)

#: The actor that owns the studies the factories make (an ``owner`` role row is made for it).
TEST_OWNER = "test-owner"
#: The actor execution grants are made for (an ``operator`` role row is made for it).
TEST_OPERATOR = "test-operator"

_TERMINAL = frozenset(state.value for state in TERMINAL_RUN_STATES)


def session_of(factory: type[Any]) -> Session:
    """The session ``factory`` is bound to (the one its rows are flushed into)."""
    session = _options(factory).sqlalchemy_session
    assert isinstance(session, Session)
    return session


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

    id = LazyFunction(new_id)
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
        lambda o: new_id() if o.state in ("stopping", "stopped") else None
    )
    created_by = TEST_OWNER
    created_at = LazyFunction(factory_now)
    updated_at = SelfAttribute("created_at")


def advance_study(
    session: Session,
    study_id: str,
    now: float,
    *,
    membership_revision: int | None = None,
    charged: Budget | None = None,
) -> None:
    """A new study revision, made by the repository calls the service's write path makes
    (``change``, ``next_revision``, ``finish``); rows, not a write: no audit entry."""
    repo = StudyRepository(session)
    study = repo.get(study_id)
    assert study is not None, f"study {study_id} is not in the session"
    repo.change(study, membership_revision=membership_revision, charged=charged)
    repo.next_revision(study, now)
    repo.finish(study, audit=None, receipt=None)


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

    id = LazyFunction(new_id)
    study_id = SelfAttribute("study.id")
    material_sha256 = SelfAttribute("material.sha256")
    replicate = 0
    membership_revision = LazyAttribute(lambda o: o.study.membership_revision + 1)
    created_at = LazyFunction(factory_now)

    @classmethod
    def _create(cls, model_class: type[Any], *args: Any, **kwargs: Any) -> Any:
        trial = super()._create(model_class, *args, **kwargs)
        advance_study(
            session_of(cls),
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

    id = LazyFunction(new_id)
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

    id = LazyFunction(new_id)
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
        session = session_of(cls)
        study = session.get(StudyRow, reservation.study_id)
        assert study is not None
        charged = budget_of(study, "charged_").plus(budget_of(reservation, "envelope_"), "Charged")
        advance_study(session, study.id, reservation.created_at, charged=charged)
        return reservation


# == grants, receipts, audit ==================================================================


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

    id = LazyFunction(new_id)
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
    subject_id = LazyFunction(new_id)
    actor_id = TEST_OWNER
    details_json = LazyAttribute(lambda o: canonical_json(o.details))
    recorded_at = LazyFunction(factory_now)


__all__ = [
    "TEST_OPERATOR",
    "TEST_OWNER",
    "AccessRoleRowFactory",
    "AuditRowFactory",
    "ExecutionGrantRowFactory",
    "MaterialRowFactory",
    "MetricDefinitionRowFactory",
    "OperationReceiptRowFactory",
    "ReservationRowFactory",
    "RunRowFactory",
    "StudyPolicyRowFactory",
    "StudyRowFactory",
    "TrialRowFactory",
]
