"""The default material catalog: recipe materials with their resource envelope and trainer."""

from __future__ import annotations

import functools
import json

from benchledger.db import current_session
from benchledger.domain.canonical import canonical_json
from benchledger.domain.study import Budget, TrainerKind, identifier, refuse
from benchledger.domain.study_runs import Material, MaterialRef, material_document, material_sha256
from benchledger.repositories.study_adapters import MaterialRepository


class SqlMaterialCatalog:
    """:class:`~benchledger.ports.study.MaterialCatalog` over the ``study_materials`` table.

    A material's identity is the sha256 of its canonical description (recipe,
    resource envelope, trainer); :meth:`load` recomputes it every time.
    """

    def register(
        self,
        *,
        recipe: object,
        envelope: Budget,
        trainer_id: str,
        builtin: bool,
        now: float,
    ) -> Material:
        if not isinstance(envelope, Budget):
            raise refuse("Material envelope must be a Budget.")
        envelope.require_positive("Material envelope")
        identifier(trainer_id, "Trainer id")
        if not isinstance(builtin, bool):
            raise refuse("Builtin must be a boolean.")
        kind = TrainerKind.BUILTIN if builtin else TrainerKind.EXTERNAL
        document = material_document(recipe, envelope, trainer_id, kind)
        material = Material(
            ref=MaterialRef(material_sha256(recipe, envelope, trainer_id, kind)),
            trainer_id=trainer_id,
            trainer_kind=kind,
            envelope=envelope,
            recipe_json=canonical_json(document["recipe"]),
        )
        MaterialRepository(current_session()).add_if_absent(material, now)
        return material

    def load(self, ref: MaterialRef) -> Material:
        material = MaterialRepository(current_session()).get(ref.sha256)
        if material is None:
            raise refuse("Recipe material not found.", "not_found")
        if _identity(material) != ref.sha256:
            raise refuse("Recipe material identity differs.", "unavailable")
        return material


@functools.lru_cache(maxsize=1024)
def _identity(material: Material) -> str:
    """The sha256 a stored material's content implies (a pure function of that content,
    so computed once per distinct content in this process)."""
    return material_sha256(
        json.loads(material.recipe_json),
        material.envelope,
        material.trainer_id,
        material.trainer_kind,
    )
