"""Model evidence of a run and the candidate-checkpoint rules (pure).

Evidence is what an evaluator retained for one run: the metric definitions it
used (each content-addressed), the checkpoint index in order, observations of
metrics at checkpoints, and which capabilities it covered. Selection picks one
checkpoint by a :class:`~benchledger.domain.study.SelectionPolicy`; the
decision is always *diagnostic* (no quality threshold is qualified).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from benchledger.domain.canonical import sha256_json
from benchledger.domain.study import (
    CheckpointRule,
    NumericalAcceptance,
    ReplicateReduce,
    SelectionPolicy,
    as_enum,
    bounded_json,
    identifier,
    refuse,
    sha256_hex,
    text,
)
from benchledger.domain.study_views import Checkpoint


class MetricGoal(enum.StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class ObservationState(enum.StrEnum):
    OBSERVED = "observed"
    MISSING = "missing"
    INVALID = "invalid"


class EvidenceState(enum.StrEnum):
    VERIFIED = "verified"
    UNVERIFIED = "unverified"


def _goal(value: object) -> MetricGoal:
    return as_enum(MetricGoal, value, "metric goal")


def _unit(value: object) -> str:
    """A metric's unit: empty, or short text."""
    return "" if value == "" else text(value, "Metric unit", 64)


@attrs.frozen
class MetricDefinition:
    """What an evaluator measures; selection policies name it by :attr:`sha256`."""

    metric_id: str = attrs.field(validator=lambda _i, _a, v: identifier(v, "Metric id"))
    name: str = attrs.field(validator=lambda _i, _a, v: text(v, "Metric name"))
    goal: MetricGoal = attrs.field(converter=_goal)
    unit: str = attrs.field(default="", validator=lambda _i, _a, v: _unit(v))

    def to_document(self) -> dict[str, Any]:
        return {
            "format": "metric_definition_v1",
            "id": self.metric_id,
            "name": self.name,
            "goal": str(self.goal),
            "unit": self.unit,
        }

    @property
    def sha256(self) -> str:
        return sha256_json(self.to_document())


def _observation_state(value: object) -> ObservationState:
    return as_enum(ObservationState, value, "observation state")


def _metric_value(value: object) -> object:
    """An observed number as a float (how it is stored); anything else is left to be refused."""
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise refuse("An observed metric needs a finite value.") from None
    return value


@attrs.frozen
class Observation:
    """A metric's value at one checkpoint; only ``observed`` carries a value.

    A value is a finite float (an integer is taken as the float it equals, as
    it is stored).
    """

    checkpoint_sha256: str = attrs.field(
        validator=lambda _i, _a, v: sha256_hex(v, "Observation checkpoint sha256")
    )
    metric_id: str = attrs.field(validator=lambda _i, _a, v: identifier(v, "Metric id"))
    state: ObservationState = attrs.field(converter=_observation_state)
    value: float | None = attrs.field(default=None, converter=_metric_value)

    def __attrs_post_init__(self) -> None:
        if self.state is ObservationState.OBSERVED:
            if type(self.value) is not float or not math.isfinite(self.value):
                raise refuse("An observed metric needs a finite value.")
        elif self.value is not None:
            raise refuse("Only an observed metric carries a value.")


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise refuse("Capabilities must be a list of names.")
    items = tuple(value)
    for item in items:
        text(item, "Capability", 64)
    if len(set(items)) != len(items):
        raise refuse("Duplicate capability.")
    return items


@attrs.frozen
class CapabilityCoverage:
    """Declared capabilities; ``omitted`` ones were declared but not produced."""

    required: tuple[str, ...] = attrs.field(default=(), converter=_names)
    optional: tuple[str, ...] = attrs.field(default=(), converter=_names)
    omitted: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def __attrs_post_init__(self) -> None:
        if set(self.required) & set(self.optional):
            raise refuse("A capability is either required or optional.")

    @property
    def available(self) -> frozenset[str]:
        return frozenset(self.required + self.optional) - frozenset(self.omitted)


def _evidence_state(value: object) -> EvidenceState:
    return as_enum(EvidenceState, value, "evidence state")


def _coverage(_instance: object, _attribute: object, value: object) -> None:
    if not isinstance(value, CapabilityCoverage):
        raise refuse("Evidence coverage must be a CapabilityCoverage.")


def _values_of(kind: type[Any], value: object, message: str) -> tuple[Any, ...]:
    """``value`` (a list or tuple of ``kind`` values) as a tuple; else ``invalid``."""
    if not isinstance(value, list | tuple) or not all(isinstance(item, kind) for item in value):
        raise refuse(message)
    return tuple(value)


def _definitions(value: Iterable[MetricDefinition]) -> tuple[MetricDefinition, ...]:
    return _values_of(
        MetricDefinition, value, "Metric definitions must be MetricDefinition values."
    )


def _checkpoints(value: Iterable[Checkpoint]) -> tuple[Checkpoint, ...]:
    return _values_of(Checkpoint, value, "Checkpoints must be Checkpoint values.")


def _observations(value: Iterable[Observation]) -> tuple[Observation, ...]:
    return _values_of(Observation, value, "Observations must be Observation values.")


#: The ``format`` of :meth:`RunEvidence.identity_document`.
IDENTITY_FORMAT = "run_evidence_v1"
_DOCUMENT_KEYS = (
    "run_id",
    "state",
    "producer_material_sha256",
    "metric_definitions",
    "checkpoints",
    "observations",
    "coverage",
    "evaluation_sha256",
)
_COVERAGE_KEYS = ("required", "optional", "omitted")
_DEFINITION_KEYS = ("id", "name", "goal", "unit")
_CHECKPOINT_KEYS = ("sha256", "step", "selected")
_OBSERVATION_KEYS = ("checkpoint_sha256", "metric_id", "state", "value")


def _exact(value: object, keys: tuple[str, ...], label: str) -> Mapping[str, Any]:
    """``value`` as an object with exactly ``keys`` (string keys)."""
    if not isinstance(value, Mapping) or set(value) != set(keys):
        raise refuse(f"{label} requires exactly: {', '.join(keys)}.")
    return value


def _array(value: object, label: str) -> Sequence[Any]:
    """``value`` as a JSON array (a list or tuple)."""
    if not isinstance(value, list | tuple):
        raise refuse(f"{label} must be a list.")
    return value


def _items(value: object, keys: tuple[str, ...], label: str) -> Iterator[Mapping[str, Any]]:
    """The objects of a JSON array, each with exactly ``keys``."""
    for item in _array(value, f"Evidence {label}s"):
        yield _exact(item, keys, f"An evidence {label}")


@attrs.frozen
class RunEvidence:
    """Everything an evaluator retained for one run."""

    run_id: str = attrs.field(validator=lambda _i, _a, v: identifier(v, "Run id"))
    state: EvidenceState = attrs.field(converter=_evidence_state)
    producer_material_sha256: str = attrs.field(
        validator=lambda _i, _a, v: sha256_hex(v, "Producer material sha256")
    )
    metric_definitions: tuple[MetricDefinition, ...] = attrs.field(converter=_definitions)
    checkpoints: tuple[Checkpoint, ...] = attrs.field(converter=_checkpoints)
    observations: tuple[Observation, ...] = attrs.field(converter=_observations)
    coverage: CapabilityCoverage = attrs.field(factory=CapabilityCoverage, validator=_coverage)
    evaluation_sha256: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.evaluation_sha256 is not None:
            sha256_hex(self.evaluation_sha256, "Evaluation sha256")
        shas = [item.sha256 for item in self.checkpoints]
        if len(set(shas)) != len(shas):
            raise refuse("Duplicate checkpoint in the index.")
        definitions = [item.sha256 for item in self.metric_definitions]
        if len(set(definitions)) != len(definitions):
            raise refuse("Duplicate metric definition.")
        pairs = [(item.checkpoint_sha256, item.metric_id) for item in self.observations]
        if len(set(pairs)) != len(pairs):
            raise refuse("Duplicate observation of a metric at a checkpoint.")
        known = set(shas)
        if any(item.checkpoint_sha256 not in known for item in self.observations):
            raise refuse("Observation of a checkpoint missing from the index.")
        bounded_json(self.to_document(), "Run evidence")

    def identity_document(self) -> dict[str, Any]:
        """The document :attr:`sha256` is computed over (``run_evidence_v1``).

        Metric definitions appear by sha256 only, so this is an identity, not a
        serialization: :meth:`to_document` is the one that reads back. The
        evidence store records this digest and re-verifies it on every load, so
        the shape never changes.
        """
        return {
            "format": IDENTITY_FORMAT,
            "run_id": self.run_id,
            "state": str(self.state),
            "producer_material_sha256": self.producer_material_sha256,
            "metric_definition_sha256s": [item.sha256 for item in self.metric_definitions],
            "checkpoints": [[c.sha256, c.step, c.selected] for c in self.checkpoints],
            "observations": [
                [o.checkpoint_sha256, o.metric_id, str(o.state), o.value] for o in self.observations
            ],
            "coverage": {
                "required": list(self.coverage.required),
                "optional": list(self.coverage.optional),
                "omitted": list(self.coverage.omitted),
            },
            "evaluation_sha256": self.evaluation_sha256,
        }

    @property
    def sha256(self) -> str:
        """The evidence's identity: sha256 of :meth:`identity_document`'s canonical JSON."""
        return sha256_json(self.identity_document())

    def to_document(self) -> dict[str, Any]:
        """The evidence as plain JSON data; :meth:`from_document` reads it back.

        The shape ``benchledger study evidence FILE`` reads (see ``docs/cli.md``)::

            {"run_id": ..., "state": "verified", "producer_material_sha256": ...,
             "metric_definitions": [{"id", "name", "goal", "unit"}, ...],
             "checkpoints": [{"sha256", "step", "selected"}, ...],
             "observations": [{"checkpoint_sha256", "metric_id", "state", "value"}, ...],
             "coverage": {"required": [...], "optional": [...], "omitted": [...]},
             "evaluation_sha256": ... or null}

        Lists keep their order (the checkpoint index is ordered).
        """
        return {
            "run_id": self.run_id,
            "state": str(self.state),
            "producer_material_sha256": self.producer_material_sha256,
            "metric_definitions": [
                {"id": item.metric_id, "name": item.name, "goal": str(item.goal), "unit": item.unit}
                for item in self.metric_definitions
            ],
            "checkpoints": [
                {"sha256": item.sha256, "step": item.step, "selected": item.selected}
                for item in self.checkpoints
            ],
            "observations": [
                {
                    "checkpoint_sha256": item.checkpoint_sha256,
                    "metric_id": item.metric_id,
                    "state": str(item.state),
                    "value": item.value,
                }
                for item in self.observations
            ],
            "coverage": {
                "required": list(self.coverage.required),
                "optional": list(self.coverage.optional),
                "omitted": list(self.coverage.omitted),
            },
            "evaluation_sha256": self.evaluation_sha256,
        }

    @classmethod
    def from_document(cls, value: object) -> RunEvidence:
        """Read :meth:`to_document`'s shape back, validating every field.

        Anything else (a missing or extra key, a wrong type, a rule of the
        value objects broken) is refused with ``StudyError(invalid)``; nothing
        but a :class:`~benchledger.errors.StudyError` escapes.
        """
        if isinstance(value, Mapping) and value.get("format") == IDENTITY_FORMAT:
            raise refuse(
                "This is a run evidence identity document (metric definitions by sha256 "
                "only); it cannot be read back. Use RunEvidence.to_document()."
            )
        document = _exact(value, _DOCUMENT_KEYS, "Run evidence")
        coverage = _exact(document["coverage"], _COVERAGE_KEYS, "Evidence coverage")
        return cls(
            run_id=document["run_id"],
            state=document["state"],
            producer_material_sha256=document["producer_material_sha256"],
            metric_definitions=tuple(
                MetricDefinition(
                    metric_id=item["id"], name=item["name"], goal=item["goal"], unit=item["unit"]
                )
                for item in _items(document["metric_definitions"], _DEFINITION_KEYS, "metric")
            ),
            checkpoints=tuple(
                Checkpoint(sha256=item["sha256"], step=item["step"], selected=item["selected"])
                for item in _items(document["checkpoints"], _CHECKPOINT_KEYS, "checkpoint")
            ),
            observations=tuple(
                Observation(
                    checkpoint_sha256=item["checkpoint_sha256"],
                    metric_id=item["metric_id"],
                    state=item["state"],
                    value=item["value"],
                )
                for item in _items(document["observations"], _OBSERVATION_KEYS, "observation")
            ),
            coverage=CapabilityCoverage(
                required=_array(coverage["required"], "Required capabilities"),
                optional=_array(coverage["optional"], "Optional capabilities"),
                omitted=_array(coverage["omitted"], "Omitted capabilities"),
            ),
            evaluation_sha256=document["evaluation_sha256"],
        )


def validate_candidate_evidence(
    evidence: RunEvidence | None, trial_material_sha256: str
) -> RunEvidence:
    """Only verified evidence produced from the trial's exact material may back a candidate."""
    if evidence is None or evidence.state is not EvidenceState.VERIFIED:
        raise refuse("Candidate requires verified model evidence.", "unsupported")
    if evidence.producer_material_sha256 != trial_material_sha256:
        raise refuse("Candidate evidence differs from its trial material.", "unavailable")
    return evidence


def select_checkpoint(
    evidence: RunEvidence, policy: SelectionPolicy, requested: str | None
) -> Checkpoint:
    """The retained checkpoint the policy selects, or the refusal that applies."""
    if policy.replicate_reduce is not ReplicateReduce.INDIVIDUAL:
        raise refuse("Mean-replicate candidate selection is not qualified.", "unsupported")
    matches = [
        item
        for item in evidence.metric_definitions
        if item.sha256 == policy.metric_definition_sha256
    ]
    if len(matches) != 1:
        raise refuse(
            "Selection metric differs from the retained evaluator definition.", "incompatible"
        )
    if not set(policy.required_capabilities) <= evidence.coverage.available:
        raise refuse("Candidate lacks required evidence capabilities.", "unsupported")
    entries = evidence.checkpoints
    if policy.checkpoint_rule is CheckpointRule.EXPLICIT:
        chosen = [item for item in entries if item.sha256 == requested]
    else:
        if policy.checkpoint_rule is CheckpointRule.SELECTED:
            chosen = [item for item in entries if item.selected]
        else:
            chosen = list(entries[-1:])
        if requested is not None and (len(chosen) != 1 or chosen[0].sha256 != requested):
            raise refuse("Explicit checkpoint contradicts the selection policy.")
    if len(chosen) != 1:
        raise refuse("Selection requires one retained checkpoint.")
    checkpoint = chosen[0]
    observed = [
        item
        for item in evidence.observations
        if item.checkpoint_sha256 == checkpoint.sha256
        and item.metric_id == matches[0].metric_id
        and item.state is ObservationState.OBSERVED
    ]
    if len(observed) != 1:
        raise refuse("Selection requires a defined metric at this checkpoint.", "unavailable")
    # A successful fit supplies diagnostics, never an invented quality threshold.
    if policy.numerical_acceptance is NumericalAcceptance.REQUIRED:
        raise refuse(
            "This evaluator has no qualified numerical acceptance criterion.", "unsupported"
        )
    return checkpoint
