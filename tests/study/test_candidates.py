"""Candidate selection: each checkpoint rule, and each refusal."""

from __future__ import annotations

from typing import Any

import pytest

from benchledger.domain.study import SelectionPolicy
from benchledger.domain.study_evidence import CapabilityCoverage
from benchledger.domain.study_runs import Run
from benchledger.domain.study_views import Checkpoint, Study, Trial
from helpers import refused

from .helpers import CHECKPOINTS, METRIC, OTHER_METRIC, OWNER, Kit, sha


def evidenced(
    kit: Kit,
    policy: SelectionPolicy,
    *,
    final: str = "completed",
    **evidence: Any,
) -> tuple[Study, Trial, Run]:
    study, trial, _ = kit.ready(policy=policy)
    run = kit.admit(study.id, trial.id).run
    run = kit.finish(run.id, final)
    kit.evidence(run, **evidence)
    return study, trial, run


def select(kit: Kit, study: Study, trial: Trial, run: Run, checkpoint: str | None = None) -> Any:
    return kit.service.select_candidate(
        OWNER,
        study.id,
        revision=kit.revision(study.id),
        trial_id=trial.id,
        run_id=run.id,
        request_key=kit.key("candidate"),
        checkpoint_sha256=checkpoint,
    )


@pytest.mark.parametrize(
    ("rule", "requested", "expected"),
    [
        ("selected", None, CHECKPOINTS[1]),
        ("selected", CHECKPOINTS[1].sha256, CHECKPOINTS[1]),
        ("last", None, CHECKPOINTS[2]),
        ("explicit", CHECKPOINTS[0].sha256, CHECKPOINTS[0]),
    ],
)
def test_each_checkpoint_rule_retains_a_diagnostic_candidate(
    kit: Kit, rule: str, requested: str | None, expected: Checkpoint
) -> None:
    study, trial, run = evidenced(kit, kit.policy(rule))
    before = kit.revision(study.id)
    result = select(kit, study, trial, run, requested)
    assert result.checkpoint == expected
    candidate = result.candidate
    assert candidate.checkpoint_sha256 == expected.sha256
    assert candidate.decision == "diagnostic" and candidate.limitations
    assert candidate.evaluation_sha256 == sha("e")
    assert candidate.policy_sha256 == kit.policy(rule).sha256
    assert result.ref.id == candidate.id and result.ref.sha256 == candidate.sha256
    assert kit.revision(study.id) == before + 1
    actions = [action for action, _, _ in kit.audit()]
    assert actions[-2:] == ["studies.select_candidate", "studies.candidate_selected"]
    assert kit.service.candidate(OWNER, candidate.id) == result


REFUSALS: list[tuple[str, str, dict[str, Any], str | None, str]] = [
    # (id, code, setup, requested checkpoint, message fragment)
    ("mean", "unsupported", {"policy": {"replicate_reduce": "mean"}}, None, "Mean-replicate"),
    ("metric", "incompatible", {"evidence": {"definitions": (OTHER_METRIC,)}}, None, "metric"),
    (
        "capabilities",
        "unsupported",
        {
            "policy": {"required_capabilities": ("validation",)},
            "evidence": {
                "coverage": CapabilityCoverage(required=("validation",), omitted=("validation",))
            },
        },
        None,
        "capabilities",
    ),
    ("explicit-none", "invalid", {"rule": "explicit"}, None, "one retained checkpoint"),
    ("explicit-unknown", "invalid", {"rule": "explicit"}, sha("9"), "one retained checkpoint"),
    ("contradicts", "invalid", {"rule": "selected"}, CHECKPOINTS[0].sha256, "contradicts"),
    (
        "no-selected",
        "invalid",
        {"rule": "selected", "evidence": {"checkpoints": (CHECKPOINTS[0], CHECKPOINTS[2])}},
        None,
        "one retained checkpoint",
    ),
    (
        "two-selected",
        "invalid",
        {
            "rule": "selected",
            "evidence": {"checkpoints": (CHECKPOINTS[1], Checkpoint(sha("d"), 400, True))},
        },
        None,
        "one retained checkpoint",
    ),
    (
        "empty-index",
        "invalid",
        {"evidence": {"checkpoints": (), "observed": ()}},
        None,
        "one retained checkpoint",
    ),
    (
        "unobserved",
        "unavailable",
        {"evidence": {"observed": (CHECKPOINTS[0].sha256,)}},
        None,
        "defined metric",
    ),
    (
        "numerical",
        "unsupported",
        {"policy": {"numerical_acceptance": "required"}},
        None,
        "numerical acceptance",
    ),
    ("unverified", "unsupported", {"evidence": {"state": "unverified"}}, None, "verified"),
    (
        "other-material",
        "unavailable",
        {"evidence": {"material_sha256": sha("7")}},
        None,
        "trial material",
    ),
    ("not-completed", "conflict", {"final": "failed"}, None, "not completed"),
    ("no-evaluation", "unavailable", {"evidence": {"evaluation_sha256": None}}, None, "evaluation"),
]


@pytest.mark.parametrize(
    ("code", "setup", "requested", "fragment"),
    [item[1:] for item in REFUSALS],
    ids=[item[0] for item in REFUSALS],
)
def test_selection_refusals(
    kit: Kit, code: str, setup: dict[str, Any], requested: str | None, fragment: str
) -> None:
    policy = kit.policy(setup.get("rule", "last"), **setup.get("policy", {}))
    study, trial, run = evidenced(
        kit, policy, final=setup.get("final", "completed"), **setup.get("evidence", {})
    )
    with refused(kit.db, code) as caught:
        select(kit, study, trial, run, requested)
    error = caught.value
    assert fragment in str(error)
    assert error.status == 409 or code == "invalid"


def test_selection_without_evidence_is_unsupported(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run = kit.finish(kit.admit(study.id, trial.id).run.id)
    with refused(kit.db, "unsupported"):
        select(kit, study, trial, run)


def test_selection_needs_the_trial_and_run_of_this_study(kit: Kit) -> None:
    study, trial, run = evidenced(kit, kit.policy())
    other_study, other_trial, other_run = evidenced(kit, kit.policy())
    second = kit.member(study.id)
    with refused(kit.db, "invalid") as caught:
        select(kit, study, other_trial, other_run)
    error = caught.value
    assert "another study" in str(error)
    with refused(kit.db, "invalid") as caught:
        select(kit, study, second, run)
    error = caught.value
    assert "does not belong" in str(error)
    with refused(kit.db, "invalid") as caught:
        select(kit, study, trial, other_run)
    error = caught.value
    assert "does not belong" in str(error)
    del other_study


def test_candidates_page_by_cursor(kit: Kit) -> None:
    study, trial, run = evidenced(kit, kit.policy())
    refs = sorted((select(kit, study, trial, run).ref for _ in range(3)), key=lambda ref: ref.id)
    first = kit.service.candidates(OWNER, run.id, limit=2)
    assert first.candidates == tuple(refs[:2]) and first.next_cursor == refs[1].id
    second = kit.service.candidates(OWNER, run.id, cursor=first.next_cursor, limit=2)
    assert second.candidates == (refs[2],) and second.next_cursor is None
    with refused(kit.db, "not_found"):
        kit.service.candidates(OWNER, "no-such-run")
    with refused(kit.db, "not_found"):
        kit.service.candidate(OWNER, "no-such-candidate")
    with refused(kit.db, "invalid"):
        kit.service.candidates(OWNER, run.id, limit=21)


def test_metric_definition_is_matched_by_sha(kit: Kit) -> None:
    assert METRIC.sha256 != OTHER_METRIC.sha256
    study, trial, run = evidenced(kit, kit.policy(), definitions=(OTHER_METRIC, METRIC))
    assert select(kit, study, trial, run).checkpoint == CHECKPOINTS[2]


def test_a_candidate_whose_run_differs_from_its_reservation_is_unavailable(kit: Kit) -> None:
    import sqlalchemy as sa

    study, trial, run = evidenced(kit, kit.policy())
    result = select(kit, study, trial, run)
    with kit.db.write() as session:
        session.execute(
            sa.text("UPDATE study_runs SET actor_id = 'mallory' WHERE id = :id"), {"id": run.id}
        )
    with refused(kit.db, "unavailable") as caught:
        kit.service.candidate(OWNER, result.candidate.id)
    error = caught.value
    assert "Reservation and Run receipt differ" in str(error)
    with refused(kit.db, "unavailable"):
        kit.service.candidates(OWNER, run.id)
    with refused(kit.db, "unavailable"):
        select(kit, study, trial, run)
