"""A study's materials and runs: what a trial runs and what its registry reports.

A :class:`Material` is a registered recipe (its trainer and resource envelope),
named by the sha256 of its canonical description (:class:`MaterialRef`);
:class:`MaterialSpec` is one as a person writes it. :class:`RunRequest` is what
a study asks the run registry to admit and :class:`Run` an attempt as the
registry knows it. Pure: no SQL, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from benchledger.domain.canonical import sha256_json
from benchledger.domain.study import (
    ACTIVE_RUN_STATES,
    TERMINAL_RUN_STATES,
    Budget,
    RunState,
    TrainerKind,
    as_enum,
    bounded_json,
    field_check,
    identifier,
    refuse,
    sha256_hex,
)


def _trainer_kind(value: object) -> TrainerKind:
    return as_enum(TrainerKind, value, "trainer kind")


def _run_state(value: object) -> RunState:
    return as_enum(RunState, value, "run state")


# -- materials -----------------------------------------------------------------------


@attrs.frozen
class MaterialRef:
    """A recipe material, by the sha256 of its canonical description."""

    sha256: str = attrs.field(validator=field_check(lambda v, _n: sha256_hex(v, "Material sha256")))


@attrs.frozen
class Material:
    """A registered recipe material: what it trains, with what, within which envelope."""

    ref: MaterialRef
    trainer_id: str = attrs.field(validator=field_check(lambda v, _n: identifier(v, "Trainer id")))
    trainer_kind: TrainerKind = attrs.field(converter=_trainer_kind)
    envelope: Budget
    recipe_json: str

    @property
    def builtin(self) -> bool:
        return self.trainer_kind is TrainerKind.BUILTIN

    @property
    def sha256(self) -> str:
        return self.ref.sha256


def material_document(
    recipe: object, envelope: Budget, trainer_id: str, trainer_kind: TrainerKind
) -> dict[str, Any]:
    """The canonical description a material's sha256 is computed over.

    The recipe must be canonical JSON data of at most 1 MiB (``invalid``).
    """
    recipe_value = _recipe(recipe)
    return {
        "format": "recipe_material_v1",
        "recipe": recipe_value,
        "resource_envelope": envelope.to_document(),
        "trainer": {"id": trainer_id, "kind": str(trainer_kind)},
    }


def material_sha256(
    recipe: object, envelope: Budget, trainer_id: str, trainer_kind: TrainerKind
) -> str:
    return sha256_json(material_document(recipe, envelope, trainer_id, trainer_kind))


def _recipe(recipe: object) -> Any:
    """A recipe as plain JSON data: canonical, at most :data:`MAX_DOCUMENT_BYTES`."""
    return json.loads(bounded_json(recipe, "Material recipe"))


#: The keys of a material document (``benchledger study material FILE``).
MATERIAL_SPEC_KEYS = ("recipe", "envelope", "trainer_id", "builtin")


@attrs.frozen
class MaterialSpec:
    """A recipe material as a person describes it, before it is registered.

    The document (``{"recipe", "envelope", "trainer_id", "builtin"}``) is read
    and checked by :meth:`from_document`; registering it yields a
    :class:`Material` whose ref is :attr:`ref`.
    """

    recipe: Any
    envelope: Budget
    trainer_id: str
    builtin: bool

    @property
    def trainer_kind(self) -> TrainerKind:
        return TrainerKind.BUILTIN if self.builtin else TrainerKind.EXTERNAL

    @property
    def ref(self) -> MaterialRef:
        """The ref the material has once registered (its canonical description's sha256)."""
        return MaterialRef(
            material_sha256(self.recipe, self.envelope, self.trainer_id, self.trainer_kind)
        )

    @classmethod
    def from_document(cls, value: object) -> MaterialSpec:
        """Read one material document; ``StudyError(invalid)`` when it is not one."""
        if not isinstance(value, Mapping) or set(value) != set(MATERIAL_SPEC_KEYS):
            raise refuse(f"A material needs exactly: {', '.join(MATERIAL_SPEC_KEYS)}.")
        if not isinstance(value["builtin"], bool):
            raise refuse("Material builtin must be true or false.")
        return cls(
            recipe=_recipe(value["recipe"]),
            envelope=Budget.from_document(value["envelope"], "Material envelope"),
            trainer_id=identifier(value["trainer_id"], "Trainer id"),
            builtin=value["builtin"],
        )

    def to_document(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "envelope": self.envelope.to_document(),
            "trainer_id": self.trainer_id,
            "builtin": self.builtin,
        }


# -- runs (as the run registry reports them) -------------------------------------------


@attrs.frozen
class RunRequest:
    """What a study asks the run registry to admit: one exact attempt."""

    run_id: str
    run_key: str
    request_sha256: str
    actor_id: str
    study_id: str
    trial_id: str
    material_sha256: str
    parent_run_id: str | None
    approval_id: str | None


@attrs.frozen
class Run:
    """A run attempt as its registry knows it.

    ``custody_ceased`` says the registry has proved the attempt's process gone
    (drained); a terminal state without it is not yet *ceased*.
    """

    id: str
    state: RunState = attrs.field(converter=_run_state)
    actor_id: str
    study_id: str
    trial_id: str
    request_sha256: str
    material_sha256: str
    parent_run_id: str | None
    approval_id: str | None
    custody_ceased: bool
    created_at: float
    updated_at: float

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_RUN_STATES

    @property
    def ceased(self) -> bool:
        """Terminal and with custody proved ended: it can consume nothing more."""
        return self.state in TERMINAL_RUN_STATES and self.custody_ceased
