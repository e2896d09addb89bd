"""The bundled example data and the deterministic example evaluator."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

from benchledger.adapters.verification import StructuralResultVerifier
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import DependencyFailed
from benchledger.examples import _generate, data_path, example_policy, example_suite
from benchledger.examples import evaluator as example


def test_committed_data_is_what_the_generator_writes() -> None:
    for name, text in _generate.rendered().items():
        assert data_path(name).read_text(encoding="utf-8") == text, f"regenerate {name}"


def test_suite_and_policy_fit_together() -> None:
    suite = example_suite()
    policy = example_policy()
    assert len(suite.cases) == 300
    assert policy.suite_sha256 == suite.sha256
    assert len(policy.required_locales) >= 3
    assert len({case.source_locale for case in suite.cases}) >= 3
    small = example_suite(10)
    assert [case.key for case in small.cases] == [case.key for case in suite.cases[:10]]
    bound = example_policy(small, candidate_model_id="example-mt-lite")
    assert bound.suite_sha256 == small.sha256
    assert bound.candidate_model_id == "example-mt-lite"
    assert bound.campaign_id != policy.campaign_id


def _claim(plan: CampaignPlan, locale: str, key: str, attempt: int) -> ClaimedCase:
    job = plan.job_payload(locale, key)
    return ClaimedCase(
        work_id=job["work_id"],
        campaign_id=plan.campaign_id,
        target_locale=locale,
        suite_case_key=key,
        job_payload=job,
        attempt=attempt,
        max_attempts=3,
        lease_owner="test",
        lease_token="token",
        lease_expires_at=1.0,
    )


def _outcomes(policy: CampaignPolicy, suite: Suite, attempt: int) -> collections.Counter[Any]:
    plan = CampaignPlan(policy, suite)
    seen: collections.Counter[Any] = collections.Counter()
    for work in plan.work():
        claim = _claim(plan, work.target_locale, work.suite_case_key, attempt)
        try:
            result = example.evaluate(claim, lambda: None)
        except DependencyFailed as error:
            assert example.CODES[error.code] is error.retryable
            seen[(error.code, error.retryable)] += 1
        else:
            StructuralResultVerifier().verify_result(result, policy)
            assert result == example.evaluate(claim, lambda: None)
            seen["ok"] += 1
    return seen


def test_the_evaluator_fails_some_items_retryably_then_succeeds() -> None:
    suite = example_suite(60)
    policy = example_policy(suite)
    first, second, third = (_outcomes(policy, suite, attempt) for attempt in (1, 2, 3))
    assert first[(example.TIMEOUT, True)] > 0
    assert first[(example.RATE_LIMITED, True)] > 0
    assert second[(example.RATE_LIMITED, True)] == first[(example.RATE_LIMITED, True)]
    assert second[(example.TIMEOUT, True)] == 0
    assert third == {"ok": 60 * len(policy.required_locales)}


def test_a_lite_candidate_fails_some_items_for_good() -> None:
    suite = example_suite(60)
    policy = example_policy(suite, candidate_model_id="example-mt-lite")
    outcomes = _outcomes(policy, suite, attempt=3)
    assert outcomes[(example.LOCALE_UNSUPPORTED, False)] == 60
    assert outcomes[(example.SOURCE_TOO_LONG, False)] > 0
    assert outcomes["ok"] > 0


@pytest.mark.parametrize("locale", ["de-DE", "ja-JP"])
def test_results_carry_no_text(locale: str) -> None:
    suite = example_suite(5)
    plan = CampaignPlan(example_policy(suite), suite)
    for case in suite.cases:
        result = example.result_for(plan.job_payload(locale, case.key))
        assert case.source_text not in repr(result)
        assert 0 <= result["score"] <= 1


def test_example_study_data_round_trips() -> None:
    from benchledger.domain.study import Budget, SelectionPolicy
    from benchledger.domain.study_evidence import RunEvidence
    from benchledger.examples import study

    spec = json.loads(data_path("study.json").read_text(encoding="utf-8"))
    assert SelectionPolicy.from_document(spec["policy"]) == study.example_policy()
    assert Budget.from_document(spec["limits"]) == study.LIMITS
    materials = json.loads(data_path("materials.json").read_text(encoding="utf-8"))
    assert [study.material_from_document(item)[1] for item in materials] == [study.ENVELOPE] * 3
    evidence = study.example_evidence("run-1", "a" * 64)
    assert RunEvidence.from_document(evidence.to_document()) == evidence
    assert sum(item.selected for item in evidence.checkpoints) == 1
