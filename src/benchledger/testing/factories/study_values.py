# mypy: disable-error-code="no-untyped-call"
"""Factories of the study value objects: budgets, policies, materials, checkpoints, evidence.

Each returns the real attrs object (``Budget``, ``SelectionPolicy``,
``MaterialRef``, ``Material``, ``MetricDefinition``, ``Checkpoint``,
``RunEvidence``); every digest is the domain's own (``SelectionPolicy.sha256``,
``material_sha256``, ``RunEvidence.sha256``). Nothing here touches a database.
"""

from __future__ import annotations

import uuid

from factory.base import Factory
from factory.declarations import (
    LazyAttribute,
    LazyFunction,
    SelfAttribute,
    Sequence,
    SubFactory,
)

from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.study import Budget, SelectionPolicy, TrainerKind
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
)
from benchledger.domain.study_runs import Material, MaterialRef, material_document, material_sha256
from benchledger.domain.study_views import Checkpoint


def new_id() -> str:
    """An id as the service makes one (``uuid4().hex``)."""
    return uuid.uuid4().hex


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

    run_id = LazyFunction(new_id)
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


__all__ = [
    "BudgetFactory",
    "CheckpointFactory",
    "EnvelopeFactory",
    "MaterialFactory",
    "MaterialRefFactory",
    "MetricDefinitionFactory",
    "RunEvidenceFactory",
    "SelectionPolicyFactory",
    "new_id",
]
