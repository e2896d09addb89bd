"""Pure study rules: value objects, policy identity, custody and access (no database)."""

from __future__ import annotations

from typing import Any

import pytest

from benchledger.domain.study import Budget, RunState, SelectionPolicy, StudyState, request_sha256
from benchledger.domain.study_documents import from_document, to_document
from benchledger.domain.study_rules import (
    OPERATIONS,
    ChildCustody,
    Role,
    reconciled_state,
    role_permits,
)
from benchledger.domain.study_runs import MaterialRef, Run
from benchledger.errors import StudyError

from .helpers import METRIC


def _invalid(call: Any, *args: Any, **kwargs: Any) -> StudyError:
    with pytest.raises(StudyError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == "invalid" and caught.value.status == 400
    return caught.value


def test_budget_dimensions_are_natural_numbers() -> None:
    for bad in (-1, 1.5, True, "1", None):
        _invalid(Budget, bad, 1, 1, 1)
    assert Budget(1, 2, 3, 4) + Budget(4, 3, 2, 1) == Budget(5, 5, 5, 5)
    assert Budget.from_document(Budget(1, 2, 3, 4).to_document()) == Budget(1, 2, 3, 4)
    _invalid(Budget.from_document, {"attempt_slots": 1})
    assert Budget(2, 2, 2, 2).exceeded(Budget(1, 2, 3, 1)) == (
        "attempt_slots",
        "peak_staging_bytes",
    )


def test_selection_policy_rules_and_identity() -> None:
    policy = SelectionPolicy(METRIC.sha256, "last", ("b", "a"))
    document = policy.to_document()
    assert document["format"] == "selection_policy_v1"
    assert document["required_capabilities"] == ["b", "a"]
    assert SelectionPolicy.from_document(document) == policy
    assert policy.sha256 != SelectionPolicy(METRIC.sha256, "last", ("a", "b")).sha256
    _invalid(SelectionPolicy, "not-a-sha", "last")
    _invalid(SelectionPolicy, METRIC.sha256, "best")
    _invalid(SelectionPolicy, METRIC.sha256, "last", replicate_reduce="median")
    _invalid(SelectionPolicy, METRIC.sha256, "last", numerical_acceptance="maybe")
    _invalid(SelectionPolicy, METRIC.sha256, "last", tie_break="run_id")
    _invalid(SelectionPolicy, METRIC.sha256, "last", ("a", "a"))
    _invalid(SelectionPolicy, METRIC.sha256, "last", tuple(f"c{i}" for i in range(65)))
    _invalid(SelectionPolicy.from_document, {**document, "format": "selection_policy_v2"})
    _invalid(SelectionPolicy.from_document, {**document, "extra": 1})


def test_metric_definitions_are_validated() -> None:
    from benchledger.domain.study_evidence import MetricDefinition

    assert MetricDefinition("accuracy", "Accuracy", "maximize", unit="%").unit == "%"
    assert MetricDefinition("accuracy", "Accuracy", "maximize").unit == ""
    for unit in (None, 5, ["%"], "a\x00b", "u" * 65):
        _invalid(MetricDefinition, "accuracy", "Accuracy", "maximize", unit=unit)
    _invalid(MetricDefinition, "accuracy", "Accuracy", "best")


def test_the_request_digest_is_stable_and_validates_its_inputs() -> None:
    # Pinned: every stored receipt, reservation and run carries this digest.
    digest = request_sha256("studies.stop", "study-1", {"revision": 3})
    assert digest == "90bafe125258e4a37079e4dad9dc5181a2d60a2c836a6b3245260a3e95878ebf"
    assert request_sha256("studies.stop", "study-1", {"revision": 4}) != digest
    assert request_sha256("studies.save", "study-1", {"revision": 3}) != digest
    assert request_sha256("studies.stop", None, {"revision": 3}) != digest
    _invalid(request_sha256, "", "study-1", {})
    _invalid(request_sha256, None, "study-1", {})
    _invalid(request_sha256, "studies.stop", "no such id!", {})
    _invalid(request_sha256, "studies.stop", "study-1", [("revision", 3)])
    _invalid(request_sha256, "studies.stop", "study-1", {"revision": float("nan")})
    _invalid(request_sha256, "studies.stop", "study-1", {"revision": object()})


def test_material_refs_are_sha256() -> None:
    _invalid(MaterialRef, "A" * 64)
    assert MaterialRef("a" * 64).sha256 == "a" * 64


def _run(state: str, ceased: bool = False) -> Run:
    return Run(
        id="run",
        state=state,
        actor_id="alice",
        study_id="study",
        trial_id="trial",
        request_sha256="a" * 64,
        material_sha256="b" * 64,
        parent_run_id=None,
        approval_id=None,
        custody_ceased=ceased,
        created_at=0.0,
        updated_at=0.0,
    )


def test_a_run_has_ceased_only_when_terminal_with_custody_ended() -> None:
    assert _run("completed", ceased=True).ceased
    assert not _run("completed").ceased
    for state in ("queued", "running", "cancelling", "unknown"):
        assert not _run(state).ceased
    assert _run("queued").active and not _run("unknown").active
    assert from_document(Run, to_document(_run("failed", True))) == _run("failed", True)
    assert RunState("interrupted") is RunState.INTERRUPTED


def test_lifecycle_moves_after_reconciliation() -> None:
    quiet = ChildCustody(ceased=True, unknown=False, active=False)
    busy = ChildCustody(ceased=False, unknown=False, active=True)
    lost = ChildCustody(ceased=False, unknown=True, active=False)
    move = reconciled_state(StudyState.OPEN, lost)
    assert move is not None and move.state is StudyState.UNKNOWN and move.close_epoch
    assert reconciled_state(StudyState.OPEN, busy) is None
    assert reconciled_state(StudyState.DRAFT, lost) is None
    stopped = reconciled_state(StudyState.STOPPING, quiet)
    assert stopped is not None and stopped.state is StudyState.STOPPED and not stopped.close_epoch
    assert reconciled_state(StudyState.STOPPING, busy) is None
    back = reconciled_state(StudyState.UNKNOWN, busy)
    assert back is not None and back.state is StudyState.STOPPING
    assert reconciled_state(StudyState.STOPPED, lost) is None


def test_role_permissions() -> None:
    owner_only = {name for name, rule in OPERATIONS.items() if rule.owner_only}
    assert {"studies.create", "studies.save", "studies.continue", "studies.approve"} <= owner_only
    for operation in OPERATIONS:
        assert role_permits(Role.OWNER, operation)
        assert not role_permits(None, operation)
    assert role_permits(Role.VIEWER, "studies.get")
    assert role_permits(Role.VIEWER, "studies.run")
    assert role_permits(Role.VIEWER, "studies.run_evidence")
    assert not role_permits(Role.VIEWER, "studies.report_run")
    assert not role_permits(Role.VIEWER, "studies.admit")
    assert role_permits(Role.OPERATOR, "studies.admit")
    assert role_permits(Role.OPERATOR, "studies.stop")
    assert not role_permits(Role.OPERATOR, "studies.prepare_trial")
    assert role_permits(Role.EDITOR, "studies.select_candidate")
    assert not role_permits(Role.EDITOR, "studies.save")
    assert not role_permits(Role.OWNER, "studies.no_such_operation")
