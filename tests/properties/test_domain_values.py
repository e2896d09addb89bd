"""Hostile arguments to the domain constructors the services take: a documented
``LedgerError``, or, only where :data:`ACCEPTS` lists it, a value whose identity and
documents can be computed.

A refusal is required: a field given a focused hostile value that ``ACCEPTS`` does
not list for it must be refused (so switching a validator off fails a test), and a
mixed probe always includes one such value.

Every field of every value object meets every hostile value (the other fields
those of a valid example), and every key of every document read at the
boundary (``from_payload``, ``from_manifest``, ``from_document``) too; then
hypothesis mixes them. No database: these are quick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite, SuiteCase
from benchledger.domain.campaign_results import ClaimedCase, ClaimedReport
from benchledger.domain.study import Budget, SelectionPolicy, request_sha256
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
)
from benchledger.domain.study_runs import MaterialRef, MaterialSpec
from benchledger.domain.study_views import Checkpoint
from benchledger.errors import LedgerError
from benchledger.examples import example_policy, example_suite
from benchledger.examples import study as study_example

from .helpers import assert_documented
from .hostile import FOCUSED_NAMES, HOSTILE, NAMED, short

SUITE = example_suite(cases=2)
POLICY = example_policy(SUITE)
CLAIM = ClaimedCase(
    work_id="benchmark-work-" + "a" * 64,
    campaign_id=POLICY.campaign_id,
    target_locale="de-DE",
    suite_case_key=SUITE.cases[0].key,
    job_payload={},
    attempt=1,
    max_attempts=3,
    lease_owner="w-1",
    lease_token="token",
    lease_expires_at=1.0,
)
REPORT_CLAIM = ClaimedReport(POLICY.campaign_id, 1, 3, "w-1", "token", 1.0)
EVIDENCE = study_example.example_evidence("run-1", "a" * 64)

#: Valid examples of every attrs value object the services take.
EXAMPLES: dict[type[Any], Any] = {
    SuiteCase: SUITE.cases[0],
    Suite: SUITE,
    CampaignPolicy: POLICY,
    CampaignPlan: CampaignPlan(POLICY, SUITE),
    ClaimedCase: CLAIM,
    ClaimedReport: REPORT_CLAIM,
    Budget: Budget(1, 2, 3, 4),
    SelectionPolicy: study_example.example_policy(),
    MaterialRef: MaterialRef("b" * 64),
    Checkpoint: EVIDENCE.checkpoints[0],
    MetricDefinition: EVIDENCE.metric_definitions[0],
    Observation: EVIDENCE.observations[0],
    CapabilityCoverage: EVIDENCE.coverage,
    RunEvidence: EVIDENCE,
}

#: Documents read at the boundary: (reader, a valid document).
DOCUMENTS: dict[str, tuple[Callable[[Any], Any], dict[str, Any]]] = {
    "SuiteCase.from_payload": (SuiteCase.from_payload, SUITE.cases[0].as_payload()),
    "Suite.from_manifest": (Suite.from_manifest, SUITE.manifest()),
    "CampaignPolicy.from_payload": (CampaignPolicy.from_payload, POLICY.as_payload()),
    "Budget.from_document": (Budget.from_document, Budget(1, 2, 3, 4).to_document()),
    "SelectionPolicy.from_document": (
        SelectionPolicy.from_document,
        study_example.example_policy().to_document(),
    ),
    "RunEvidence.from_document": (RunEvidence.from_document, EVIDENCE.to_document()),
    "MaterialSpec.from_document": (
        MaterialSpec.from_document,
        {
            "recipe": {"lr": "3e-4"},
            "envelope": Budget(1, 2, 3, 4).to_document(),
            "trainer_id": "trainer",
            "builtin": False,
        },
    ),
    "request_sha256 body": (lambda body: request_sha256("studies.x", None, body), {"a": 1}),
}


#: The focused hostile values a field (or a document key) accepts: every other focused
#: value must be refused. Free text takes invisible and bidi characters (shown escaped
#: wherever a person reads them); JSON-valued fields (job payloads, recipes, request
#: bodies) take any JSON value; numbers take numbers. Listed by hand: a new entry
#: here is a decision, not a measurement.
ACCEPTS: dict[str, frozenset[str]] = {
    label: frozenset(names)
    for label, names in {
        "SuiteCase.source_text": ("bidi", "zero-width", "newline"),
        "SuiteCase.from_payload[source_text]": ("bidi", "zero-width", "newline"),
        "CampaignPolicy.valid_until": ("2**63",),
        "CampaignPolicy.from_payload[valid_until]": ("2**63",),
        "ClaimedCase.job_payload": ("huge-int-in-dict", "non-text-key"),
        "SelectionPolicy.required_capabilities": ("huge-int-in-dict",),
        "Checkpoint.selected": ("True",),
        "MetricDefinition.name": ("not-nfc",),
        "MetricDefinition.unit": ("empty", "not-nfc"),
        "Observation.value": ("-1", "2**63"),
        "RunEvidence.evaluation_sha256": ("None",),
        "RunEvidence.from_document[evaluation_sha256]": ("None",),
        "MaterialSpec.from_document[builtin]": ("True",),
        **{
            key: (
                *("None", "True", "-1", "2**63", "empty", "bidi", "zero-width", "nul"),
                *("newline", "not-nfc"),
            )
            for key in ("MaterialSpec.from_document[recipe]", "request_sha256 body[a]")
        },
    }.items()
}
assert all(names <= set(FOCUSED_NAMES) for names in ACCEPTS.values())


def _use(value: Any) -> None:
    """What the services compute from an accepted value: its identity and documents."""
    for name in ("sha256", "campaign_id", "work_count"):
        if hasattr(type(value), name):
            getattr(value, name)
    for method in ("as_payload", "manifest", "to_document", "identity_document"):
        if callable(getattr(value, method, None)):
            getattr(value, method)()
    if isinstance(value, CampaignPlan):
        list(value.work())


def _check(label: str, build: Callable[[], Any], shown: Any, *, refuse: bool) -> None:
    """``build()`` is refused with a documented code (``refuse``), or refused or usable."""
    try:
        _use(build())
    except LedgerError as error:
        assert_documented(error)
        return
    except Exception as error:  # the property: nothing but a LedgerError escapes
        raise AssertionError(
            f"{label}({short(shown)}) raised {type(error).__name__}: {short(error)}"
        ) from error
    assert not refuse, f"{label}({short(shown)}) was accepted: it must be refused"


def _refused(label: str) -> list[str]:
    """The focused values ``label`` must refuse (every one ``ACCEPTS`` does not list)."""
    return [name for name in FOCUSED_NAMES if name not in ACCEPTS.get(label, ())]


def _fields(kind: type[Any]) -> list[attrs.Attribute[Any]]:
    return [field for field in attrs.fields(kind) if field.init]


def _build(kind: type[Any], **changes: Any) -> Callable[[], Any]:
    example = EXAMPLES[kind]
    arguments = {field.alias: getattr(example, field.name) for field in _fields(kind)}
    arguments.update(changes)
    return lambda: kind(**arguments)


@pytest.mark.parametrize("kind", list(EXAMPLES), ids=lambda kind: kind.__name__)
def test_every_field_refuses_every_hostile_value(kind: type[Any]) -> None:
    _use(_build(kind)())  # the example itself is valid
    for field in _fields(kind):
        label = f"{kind.__name__}.{field.alias}"
        for name in FOCUSED_NAMES:
            value = NAMED[name]
            refuse = name not in ACCEPTS.get(label, ())
            _check(label, _build(kind, **{field.alias: value}), value, refuse=refuse)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_every_document_key_refuses_every_hostile_value(name: str) -> None:
    read, document = DOCUMENTS[name]
    _use(read(dict(document)))  # the document itself is valid
    for hostile in FOCUSED_NAMES:
        value = NAMED[hostile]
        whole = hostile not in ACCEPTS.get(name, ())  # the whole document hostile
        _check(name, lambda v=value: read(v), value, refuse=whole)
        for key in document:
            changed = {**document, key: value}
            label = f"{name}[{key}]"
            refuse = hostile not in ACCEPTS.get(label, ())
            _check(label, lambda d=changed: read(d), value, refuse=refuse)


@settings(max_examples=300, deadline=None, database=None)
@given(
    kind=st.sampled_from(list(EXAMPLES)),
    data=st.data(),
)
def test_mixed_hostile_fields(kind: type[Any], data: st.DataObject) -> None:
    """Hostile values in several fields, one of them one its field must refuse: refused."""
    fields = _fields(kind)
    chosen = data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=len(fields)))
    changes = {field.alias: data.draw(HOSTILE) for field in chosen}
    first = chosen[0].alias
    changes[first] = NAMED[data.draw(st.sampled_from(_refused(f"{kind.__name__}.{first}")))]
    _check(kind.__name__, _build(kind, **changes), changes, refuse=True)


@settings(max_examples=300, deadline=None, database=None)
@given(name=st.sampled_from(sorted(DOCUMENTS)), data=st.data())
def test_mixed_hostile_documents(name: str, data: st.DataObject) -> None:
    read, document = DOCUMENTS[name]
    keys = data.draw(st.lists(st.sampled_from(sorted(document)), max_size=len(document)))
    changed = {**document, **{key: data.draw(HOSTILE) for key in keys}}
    extra = data.draw(st.dictionaries(st.text(max_size=5), HOSTILE, max_size=2))
    if data.draw(st.booleans()):
        changed.update(extra)
    # One key holds a value it must refuse: the document is refused, whatever else it holds.
    key = data.draw(st.sampled_from(sorted(document)))
    changed[key] = NAMED[data.draw(st.sampled_from(_refused(f"{name}[{key}]")))]
    _check(name, lambda: read(changed), changed, refuse=True)
