"""RunEvidence.to_document / from_document: a lossless round trip, validated at the boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchledger.domain.canonical import canonical_json, sha256_json
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    EvidenceState,
    MetricDefinition,
    MetricGoal,
    Observation,
    ObservationState,
    RunEvidence,
)
from benchledger.domain.study_views import Checkpoint
from benchledger.errors import StudyError
from benchledger.examples import study as example

_HEX = "0123456789abcdef"
_ID = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:@-]{0,20}\Z")
_SHA = st.text(_HEX, min_size=64, max_size=64)
_NAME = st.text(
    st.characters(
        min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp")
    ),
    min_size=1,
    max_size=30,
)
_NAME = _NAME.filter(lambda value: bool(value.strip()))
_CAPABILITIES = st.lists(_NAME, max_size=4, unique=True)


@st.composite
def evidence(draw: st.DrawFn) -> RunEvidence:
    definitions = draw(
        st.lists(
            st.builds(
                MetricDefinition,
                metric_id=_ID,
                name=_NAME,
                goal=st.sampled_from(MetricGoal),
                unit=st.one_of(st.just(""), _NAME),
            ),
            max_size=3,
            unique_by=lambda item: item.sha256,
        )
    )
    checkpoints = draw(
        st.lists(
            st.builds(
                Checkpoint,
                sha256=_SHA,
                step=st.integers(0, 2**63 - 1),
                selected=st.booleans(),
            ),
            max_size=4,
            unique_by=lambda item: item.sha256,
        )
    )
    observations: list[Observation] = []
    if checkpoints:
        pairs = draw(
            st.lists(
                st.tuples(st.sampled_from([c.sha256 for c in checkpoints]), _ID),
                max_size=6,
                unique=True,
            )
        )
        for checkpoint_sha256, metric_id in pairs:
            state = draw(st.sampled_from(ObservationState))
            value = (
                draw(
                    st.one_of(
                        st.floats(allow_nan=False, allow_infinity=False),
                        st.integers(-(2**53), 2**53),
                    )
                )
                if state is ObservationState.OBSERVED
                else None
            )
            observations.append(Observation(checkpoint_sha256, metric_id, state, value))
    required = draw(_CAPABILITIES)
    optional = draw(_CAPABILITIES.map(lambda names: [n for n in names if n not in required]))
    omitted = draw(_CAPABILITIES)
    return RunEvidence(
        run_id=draw(_ID),
        state=draw(st.sampled_from(EvidenceState)),
        producer_material_sha256=draw(_SHA),
        metric_definitions=definitions,
        checkpoints=checkpoints,
        observations=observations,
        coverage=CapabilityCoverage(required, optional, omitted),
        evaluation_sha256=draw(st.one_of(st.none(), _SHA)),
    )


@settings(max_examples=200, deadline=None)
@given(evidence())
def test_to_document_reads_back_exactly_even_through_json_text(value: RunEvidence) -> None:
    document = value.to_document()
    assert RunEvidence.from_document(document) == value
    text = canonical_json(document)  # plain JSON data, canonical-checked
    again = RunEvidence.from_document(json.loads(text))
    assert again == value and again.sha256 == value.sha256
    assert again.to_document() == document


def test_the_identity_digest_is_unchanged_by_the_document() -> None:
    """Stored evidence keeps verifying: sha256 is still over the identity document."""
    value = example.example_evidence("run-1", "a" * 64)
    assert value.sha256 == "408ff13825db9db3d2194fdba3b2a164bd67853b0455a513c09fc0fbabea149e"
    assert value.sha256 == sha256_json(value.identity_document())
    identity = value.identity_document()
    assert identity["format"] == "run_evidence_v1"
    assert identity["metric_definition_sha256s"] == [example.METRIC.sha256]
    assert value.to_document()["metric_definitions"] == [
        {"id": "val_chrf", "name": "Validation chrF", "goal": "maximize", "unit": "chrF"}
    ]
    # The examples' helpers are the domain's.
    assert example.evidence_document(value) == value.to_document()
    assert example.evidence_from_document(value.to_document()) == value


def _document() -> dict[str, Any]:
    return example.example_evidence("run-1", "a" * 64).to_document()


def _with(path: tuple[Any, ...], replacement: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(_document()))
    target = document
    for step in path[:-1]:
        target = target[step]
    if replacement is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = replacement
    return document


_DELETE = object()

BAD_DOCUMENTS = {
    "not an object": [],
    "null": None,
    "missing key": _with(("coverage",), _DELETE),
    "extra key": {**_document(), "format": "run_evidence_document_v1"},
    "bad run id": _with(("run_id",), "no spaces allowed"),
    "bad state": _with(("state",), "trusted"),
    "state not text": _with(("state",), ["verified"]),
    "bad producer": _with(("producer_material_sha256",), "A" * 64),
    "definitions not a list": _with(("metric_definitions",), {"id": "x"}),
    "definition not an object": _with(("metric_definitions", 0), "val_chrf"),
    "definition extra key": _with(("metric_definitions", 0, "format"), "metric_definition_v1"),
    "definition bad goal": _with(("metric_definitions", 0, "goal"), "best"),
    "definition unit null": _with(("metric_definitions", 0, "unit"), None),
    "duplicate definition": _with(
        ("metric_definitions",), [_document()["metric_definitions"][0]] * 2
    ),
    "checkpoints a string": _with(("checkpoints",), "abc"),
    "checkpoint missing key": _with(("checkpoints", 0, "selected"), _DELETE),
    "checkpoint selected as 1": _with(("checkpoints", 0, "selected"), 1),
    "checkpoint negative step": _with(("checkpoints", 0, "step"), -1),
    "checkpoint step as text": _with(("checkpoints", 0, "step"), "1000"),
    "duplicate checkpoint": _with(
        ("checkpoints", 1, "sha256"), _document()["checkpoints"][0]["sha256"]
    ),
    "observation of an unknown checkpoint": _with(
        ("observations", 0, "checkpoint_sha256"), "f" * 64
    ),
    "observed without a value": _with(("observations", 0, "value"), None),
    "observed as a boolean": _with(("observations", 0, "value"), True),
    "missing with a value": _with(("observations", 0, "state"), "missing"),
    "coverage not an object": _with(("coverage",), ["validation"]),
    "coverage names as text": _with(("coverage", "required"), "validation"),
    "coverage names as an object": _with(("coverage", "optional"), {"export": True}),
    "coverage overlaps": _with(("coverage", "optional"), ["validation"]),
    "bad evaluation": _with(("evaluation_sha256",), 5),
}


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_a_bad_document_is_invalid(name: str) -> None:
    with pytest.raises(StudyError) as caught:
        RunEvidence.from_document(BAD_DOCUMENTS[name])
    assert caught.value.code == "invalid" and caught.value.status == 400


def test_an_identity_document_is_refused_with_a_reason() -> None:
    identity = example.example_evidence("run-1", "a" * 64).identity_document()
    with pytest.raises(StudyError) as caught:
        RunEvidence.from_document(identity)
    assert caught.value.code == "invalid"
    assert "identity document" in caught.value.message


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(BAD_DOCUMENTS)),
    st.sampled_from(["run_id", "state", "metric_definitions", "checkpoints", "coverage"]),
    _JSON,
)
def test_any_json_is_read_or_refused_never_a_crash(base: str, key: str, junk: Any) -> None:
    document = BAD_DOCUMENTS[base]
    candidates = [junk]
    if isinstance(document, dict):
        candidates.append({**document, key: junk})
    for value in candidates:
        try:
            RunEvidence.from_document(value)
        except StudyError as error:
            assert error.code == "invalid"
