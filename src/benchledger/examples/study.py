"""Example study data: a selection policy, recipe materials and deterministic run evidence.

A study of the example translation model's fine-tuning: three recipe
materials (learning rates), each trained by an external trainer within a fixed
resource envelope; each run's evaluator reports the validation chrF at three
checkpoints. Used by ``benchledger demo`` and the tests, and written to
``study.json`` / ``materials.json`` for ``benchledger study create --spec`` and
``benchledger study material``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from benchledger.domain.study import Budget, SelectionPolicy
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    EvidenceState,
    MetricDefinition,
    Observation,
    ObservationState,
    RunEvidence,
)
from benchledger.domain.study_runs import MaterialSpec
from benchledger.domain.study_views import Checkpoint

METRIC = MetricDefinition(
    metric_id="val_chrf", name="Validation chrF", goal="maximize", unit="chrF"
)
CAPABILITIES = ("validation",)
TRAINER_ID = "example-trainer"
GIB = 2**30

#: One attempt of any example material: one slot, an hour, 1 GiB kept, 2 GiB scratch.
ENVELOPE = Budget(
    attempt_slots=1,
    admitted_wall_seconds=3600,
    retained_bytes=1 * GIB,
    peak_staging_bytes=2 * GIB,
)
#: Room for four attempts (attempt slots run out first).
LIMITS = Budget(
    attempt_slots=4,
    admitted_wall_seconds=6 * 3600,
    retained_bytes=8 * GIB,
    peak_staging_bytes=16 * GIB,
)
LEARNING_RATES = ("1e-4", "3e-4", "1e-3")


def example_policy() -> SelectionPolicy:
    return SelectionPolicy(
        metric_definition_sha256=METRIC.sha256,
        checkpoint_rule="selected",
        required_capabilities=CAPABILITIES,
        replicate_reduce="individual",
        numerical_acceptance="diagnostic",
    )


def example_study_spec(name: str = "example-mt fine-tuning sweep") -> dict[str, Any]:
    """The body of ``study create --spec``: name, limits and selection policy."""
    return {
        "name": name,
        "limits": LIMITS.to_document(),
        "policy": example_policy().to_document(),
    }


def example_materials() -> list[dict[str, Any]]:
    """The recipe materials of ``study material``: recipe, envelope, trainer, builtin."""
    return [
        {
            "recipe": {
                "base_model": "example-mt-2.0",
                "dataset": "shop-parallel-v3",
                "learning_rate": rate,
                "steps": 3000,
            },
            "envelope": ENVELOPE.to_document(),
            "trainer_id": TRAINER_ID,
            "builtin": False,
        }
        for rate in LEARNING_RATES
    ]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def example_evidence(run_id: str, material_sha256: str) -> RunEvidence:
    """Verified evidence for one run: chrF at steps 1000/2000/3000, the best one selected.

    The values depend only on the material, so every run of a material agrees.
    """
    seed = int(_digest("quality", material_sha256)[:8], 16)
    base = 48.0 + (seed % 900) / 100.0
    values = [round(base + gain, 2) for gain in (0.0, 2.1 + (seed % 7) / 10, 1.6)]
    best = max(range(3), key=lambda index: values[index])
    checkpoints = tuple(
        Checkpoint(
            sha256=_digest("checkpoint", material_sha256, str(step)),
            step=step,
            selected=index == best,
        )
        for index, step in enumerate((1000, 2000, 3000))
    )
    return RunEvidence(
        run_id=run_id,
        state=EvidenceState.VERIFIED,
        producer_material_sha256=material_sha256,
        metric_definitions=(METRIC,),
        checkpoints=checkpoints,
        observations=tuple(
            Observation(
                checkpoint_sha256=checkpoint.sha256,
                metric_id=METRIC.metric_id,
                state=ObservationState.OBSERVED,
                value=value,
            )
            for checkpoint, value in zip(checkpoints, values, strict=True)
        ),
        coverage=CapabilityCoverage(required=CAPABILITIES),
        evaluation_sha256=_digest("evaluation", material_sha256),
    )


def evidence_document(evidence: RunEvidence) -> dict[str, Any]:
    """``evidence`` in the JSON shape ``benchledger study evidence FILE`` reads.

    Kept for existing callers: it is :meth:`RunEvidence.to_document`.
    """
    return evidence.to_document()


def evidence_from_document(value: Any) -> RunEvidence:
    """Read :func:`evidence_document`'s shape (``StudyError(invalid)`` when it is not).

    Kept for existing callers: it is :meth:`RunEvidence.from_document`.
    """
    return RunEvidence.from_document(value)


def material_from_document(value: Any) -> tuple[Any, Budget, str, bool]:
    """(recipe, envelope, trainer id, builtin) of one material document.

    Kept for existing callers: it is :meth:`MaterialSpec.from_document`.
    """
    spec = MaterialSpec.from_document(value)
    return spec.recipe, spec.envelope, spec.trainer_id, spec.builtin
