# mypy: disable-error-code="no-untyped-call"
"""Factories of a run's retained evidence rows, and of the candidates selected from them.

Evidence is stored exactly as the default evidence store stores it (the
evidence row, its metric definitions, checkpoint index, observations and
capabilities); a candidate is the one the study's policy selects from that
evidence (``Candidate.sha256`` stored beside it), and selecting advances the
study as ``select_candidate`` does. Made alone, each builds what it needs.
"""

from __future__ import annotations

from typing import Any

from factory.base import Factory
from factory.declarations import (
    LazyAttribute,
    LazyFunction,
    RelatedFactory,
    SelfAttribute,
    SubFactory,
)

from benchledger.domain.canonical import canonical_json
from benchledger.domain.study import CANDIDATE_DECISION, CANDIDATE_LIMITATIONS
from benchledger.domain.study_evidence import (
    RunEvidence,
    select_checkpoint,
)
from benchledger.domain.study_runs import MaterialRef
from benchledger.domain.study_views import Candidate
from benchledger.models.study import (
    CandidateRow,
    RunCapabilityRow,
    RunCheckpointRow,
    RunEvidenceRow,
    RunMetricRow,
    RunObservationRow,
)
from benchledger.testing.factories._binding import (
    LedgerModelFactory,
    factory_now,
)
from benchledger.testing.factories.study import (
    MaterialRowFactory,
    MetricDefinitionRowFactory,
    RunRowFactory,
    StudyRowFactory,
    TrialRowFactory,
    advance_study,
    session_of,
)
from benchledger.testing.factories.study_values import (
    MetricDefinitionFactory,
    RunEvidenceFactory,
    SelectionPolicyFactory,
    new_id,
)

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
        "benchledger.testing.factories.study_evidence._EvidencePartsFactory",
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
        "benchledger.testing.factories.study_evidence._EvidencePartsFactory",
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


# == candidates ==============================================================================


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

    id = LazyFunction(new_id)
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
        advance_study(session_of(cls), row.study_id, row.created_at)
        return row


__all__ = [
    "CandidateRowFactory",
    "RunCapabilityRowFactory",
    "RunCheckpointRowFactory",
    "RunEvidenceRowFactory",
    "RunMetricRowFactory",
    "RunObservationRowFactory",
]
