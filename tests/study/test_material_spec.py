"""``MaterialSpec.from_document``: a material document is checked where it enters."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from benchledger.domain.study import Budget, TrainerKind
from benchledger.domain.study_runs import MaterialSpec, material_sha256
from benchledger.errors import StudyError
from benchledger.examples import study as example


def good() -> dict[str, Any]:
    return copy.deepcopy(example.example_materials()[0])


def test_a_good_document_reads_and_round_trips() -> None:
    spec = MaterialSpec.from_document(good())
    assert spec.envelope == example.ENVELOPE
    assert spec.trainer_id == example.TRAINER_ID
    assert spec.builtin is False and spec.trainer_kind is TrainerKind.EXTERNAL
    assert spec.to_document() == good()
    assert MaterialSpec.from_document(spec.to_document()) == spec
    assert spec.ref.sha256 == material_sha256(
        spec.recipe, spec.envelope, spec.trainer_id, TrainerKind.EXTERNAL
    )


def test_the_example_wrapper_reads_the_same() -> None:
    spec = MaterialSpec.from_document(good())
    assert example.material_from_document(good()) == (
        spec.recipe,
        spec.envelope,
        spec.trainer_id,
        spec.builtin,
    )


def _with(**changes: Any) -> dict[str, Any]:
    return {**good(), **changes}


def _without(key: str) -> dict[str, Any]:
    document = good()
    del document[key]
    return document


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (None, "needs exactly"),
        ([], "needs exactly"),
        ("recipe", "needs exactly"),
        (_without("builtin"), "needs exactly"),
        (_with(extra=1), "needs exactly"),
        (_with(builtin="false"), "builtin"),
        (_with(builtin=0), "builtin"),
        (_with(trainer_id=""), "Trainer id"),
        (_with(trainer_id="has space"), "Trainer id"),
        (_with(trainer_id=7), "Trainer id"),
        (_with(envelope={"attempt_slots": 1}), "Material envelope"),
        (_with(envelope=[1, 2, 3, 4]), "Material envelope"),
        (_with(envelope={**good()["envelope"], "attempt_slots": -1}), ""),
        (_with(recipe={"lr": float("nan")}), "canonical JSON"),
        (_with(recipe={1: "non-string key"}), "canonical JSON"),
    ],
)
def test_a_bad_document_is_refused_as_invalid(document: Any, message: str) -> None:
    with pytest.raises(StudyError) as raised:
        MaterialSpec.from_document(document)
    assert raised.value.code == "invalid"
    assert message in raised.value.message


def test_a_budget_in_the_envelope_is_a_budget() -> None:
    assert isinstance(MaterialSpec.from_document(good()).envelope, Budget)
