"""Pure rules and value objects (no database)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest

from benchledger.adapters.reporting import DefaultReportBuilder, ReportMismatch
from benchledger.adapters.verification import (
    HmacAttestationSigner,
    HmacAttestationVerifier,
    ResultRejected,
    StructuralResultVerifier,
)
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import retry_delay, work_id_for
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite, SuiteCase
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
    check_result_size,
    encode_result,
)
from benchledger.domain.campaign_views import CampaignHealth, CampaignStatus
from benchledger.domain.canonical import (
    CanonicalJsonError,
    canonical_json,
    parse_canonical_json,
    sha256_json,
)
from benchledger.errors import CampaignBlocked

from .helpers import make_plan, make_policy, make_suite

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy" / "manifest.json"


def code_of(function: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(CampaignBlocked) as caught:
        function(*args, **kwargs)  # type: ignore[operator]
    return caught.value.code


# -- canonical JSON -------------------------------------------------------------------


def test_canonical_json_is_the_stored_encoding() -> None:
    value = {"b": [1, 2.5, (3,)], "a": "é", "c": None, "d": True}
    assert canonical_json(value) == '{"a":"é","b":[1,2.5,[3]],"c":null,"d":true}'
    assert parse_canonical_json(canonical_json(value)) == json.loads(canonical_json(value))


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, {1: "x"}, {"a": object()}, b"bytes", {"s": "\ud800"}, {1.5}],
)
def test_canonical_json_refuses_what_does_not_round_trip(value: object) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json(value)


@pytest.mark.parametrize("text", ['{"b":1, "a":2}', '{"b":1,"a":2}', "NaN", "{", '"\\u00e9"'])
def test_parse_canonical_json_refuses_other_forms(text: str) -> None:
    with pytest.raises(CanonicalJsonError):
        parse_canonical_json(text)


# -- scalar rules -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, "1", None, -1, math.nan, math.inf, 10**400])
def test_timestamps(value: object) -> None:
    assert code_of(dom.timestamp, value) == dom.TIME_INVALID


@pytest.mark.parametrize("value", [0, -1, 86_400.5, math.nan, True, "5"])
def test_durations(value: object) -> None:
    assert code_of(dom.duration, value) == dom.DURATION_INVALID


def test_zero_delay_is_allowed_only_where_asked() -> None:
    assert dom.duration(0, allow_zero=True) == 0.0
    assert dom.duration(86_400) == 86_400.0


@pytest.mark.parametrize("value", ["", " w", "w ", "a\x00b", "e\u0301", "x" * 257, 5, None])
def test_identifiers(value: object) -> None:
    assert code_of(dom.identifier, value) == dom.IDENTITY_INVALID


@pytest.mark.parametrize("value", [0, 21, True, 2.0, "3"])
def test_max_attempts(value: object) -> None:
    assert code_of(dom.max_attempts_value, value) == dom.ATTEMPTS_INVALID


def test_retry_delay_is_exponential_backoff() -> None:
    assert [retry_delay(n, 5, 3600) for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert retry_delay(20, 5, 3600) == 3600
    assert retry_delay(1, 0, 0) == 0


def test_retry_delay_jitter_adds_up_to_the_fraction() -> None:
    assert retry_delay(2, 5, 3600, jitter=0.5, rng=lambda: 0.0) == 10
    assert retry_delay(2, 5, 3600, jitter=0.5, rng=lambda: 0.999999) == pytest.approx(15, abs=1e-4)
    assert retry_delay(40, 86_400, 86_400, jitter=1.0, rng=lambda: 0.9) == dom.MAX_LEASE_SECONDS


def test_dependency_codes() -> None:
    assert dom.dependency_code("store.timeout") == "benchmark.campaign.dependency.store.timeout"
    assert dom.dependency_code("x" * 120) == dom.DEPENDENCY_FAILED


# -- suite and policy -------------------------------------------------------------------


def test_suite_is_content_addressed() -> None:
    suite = make_suite(3)
    assert suite.sha256 == sha256_json(suite.manifest())
    assert Suite.from_manifest(json.loads(canonical_json(suite.manifest()))) == suite
    assert make_suite(3).sha256 == suite.sha256
    assert make_suite(4).sha256 != suite.sha256
    assert suite.case("case-0001") is suite.cases[1]
    assert suite.case("nope") is None


def _suite_of(count: int) -> Suite:
    texts = ("plain", 'quoted "text"', "back\\slash", "caf\u00e9 \u2028 \U0001f600", "tab\there")
    return Suite(
        SuiteCase(
            key=f"case-{index:05d}",
            source_id=f"src/{index}",
            source_revision="r1",
            source_text=f"{texts[index % len(texts)]} {index}",
            source_locale="en-US",
            content_type="text/plain" if index % 3 else "text/markdown",
        )
        for index in range(count)
    )


@pytest.mark.parametrize("count", [1, 2, 511, 512, 513, 1024, 1025, 1600])
def test_a_suites_sha256_is_its_canonical_manifests_at_every_batch_boundary(count: int) -> None:
    """The sha256 is computed a batch of cases at a time; it is the whole manifest's."""
    suite = _suite_of(count)
    assert suite.sha256 == sha256_json(suite.manifest())


def test_a_stored_suite_text_is_proved_canonical_by_its_sha256() -> None:
    suite = _suite_of(600)
    manifest = suite.manifest()
    text = canonical_json(manifest)
    assert Suite.from_canonical_text(text) == suite
    assert Suite.from_canonical_text(text).sha256 == suite.sha256
    not_canonical = [
        json.dumps(manifest),  # white space
        json.dumps(manifest, ensure_ascii=True, sort_keys=True, separators=(",", ":")),
        json.dumps(manifest, ensure_ascii=False, separators=(",", ":")),  # key order
        text[:-1] + ',"schema":"' + dom.SUITE_SCHEMA + '"}',  # a repeated key
        text + " ",
        text[:-1],  # not JSON
        "[]",
        canonical_json({"schema": dom.SUITE_SCHEMA, "cases": []}),
        "NaN",
    ]
    for candidate in not_canonical:
        assert candidate != text
        assert code_of(Suite.from_canonical_text, candidate) == dom.SUITE_INVALID, candidate[:40]
    assert code_of(Suite.from_canonical_text, text.encode()) == dom.SUITE_INVALID
    assert code_of(Suite.from_canonical_text, "[" * 100_000) == dom.SUITE_INVALID


def _case(**changes: object) -> dict[str, object]:
    values: dict[str, object] = {
        "key": "k",
        "source_id": "s",
        "source_revision": "r",
        "source_text": "text",
        "source_locale": "en",
        "content_type": "text/plain",
    }
    values.update(changes)
    return values


@pytest.mark.parametrize(
    "changes",
    [
        {"key": " k"},
        {"source_text": "   "},
        {"source_text": "a\x00"},
        {"source_locale": "english!"},
        {"content_type": "plain"},
        {"source_revision": ""},
    ],
)
def test_suite_cases_are_validated(changes: dict[str, object]) -> None:
    assert code_of(SuiteCase, **_case(**changes)) == dom.SUITE_INVALID


def test_suites_are_validated() -> None:
    case = SuiteCase(**_case())  # type: ignore[arg-type]
    assert code_of(Suite, []) == dom.SUITE_INVALID
    assert code_of(Suite, [case, case]) == dom.SUITE_INVALID
    assert code_of(Suite, ["not a case"]) == dom.SUITE_INVALID
    assert code_of(Suite, "abc") == dom.SUITE_INVALID
    assert code_of(Suite.from_manifest, {"cases": []}) == dom.SUITE_INVALID
    assert code_of(Suite.from_manifest, {"schema": dom.SUITE_SCHEMA, "cases": [{}]}) == (
        dom.SUITE_INVALID
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"suite_sha256": "abc"},
        {"required_locales": ()},
        {"required_locales": ("de", "de")},
        {"required_locales": "de"},
        {"required_locales": ("not a locale",)},
        {"valid_until": math.nan},
        {"valid_until": True},
        {"valid_until": -1},
        {"candidate_model_id": " padded"},
        {"candidate_provider_id": ""},
    ],
)
def test_policies_are_validated(changes: dict[str, object]) -> None:
    suite = make_suite(1)
    assert code_of(make_policy, suite, **changes) == dom.POLICY_INVALID


def test_policy_round_trips_and_is_content_addressed() -> None:
    policy = make_policy(make_suite(2), valid_until=4_102_444_800)
    assert isinstance(policy.valid_until, float)
    assert CampaignPolicy.from_payload(json.loads(canonical_json(policy.as_payload()))) == policy
    assert policy.sha256 == sha256_json(policy.as_payload())
    assert policy.campaign_id == "benchmark-campaign-" + policy.sha256
    assert code_of(CampaignPolicy.from_payload, {"suite_sha256": "x"}) == dom.POLICY_INVALID


def test_plan_requires_the_policys_suite() -> None:
    suite = make_suite(2)
    policy = make_policy(suite)
    assert code_of(CampaignPlan, policy, make_suite(3)) == dom.SUITE_MISMATCH
    assert code_of(CampaignPlan, "policy", suite) == dom.POLICY_INVALID
    assert code_of(CampaignPlan, policy, "suite") == dom.SUITE_INVALID


def test_legacy_campaign_and_work_ids_are_reproduced() -> None:
    """The policy binding and work-id derivation, checked on the legacy store's own files."""
    manifest = json.loads(LEGACY.read_text())
    checked = 0
    for sample in manifest["files"].values():
        for campaign in sample["campaigns"]:
            policy = CampaignPolicy.from_payload(campaign["policy"])
            assert policy.campaign_id == campaign["campaign_id"]
            for work in sample["work"]:
                if work["campaign_id"] == campaign["campaign_id"]:
                    assert work["work_id"] == work_id_for(
                        policy.campaign_id,
                        policy.sha256,
                        policy.suite_sha256,
                        work["target_locale"],
                        work["suite_case_key"],
                    )
                    checked += 1
    assert checked > 20


def test_plan_work_and_job_payload() -> None:
    plan = make_plan(cases=2, locales=("fr-FR", "de-DE"))
    items = list(plan.work())
    assert plan.work_count == len(items) == 4
    assert [(w.target_locale, w.suite_case_key) for w in items][:2] == [
        ("fr-FR", "case-0000"),
        ("fr-FR", "case-0001"),
    ]
    payload = plan.job_payload("de-DE", "case-0001")
    assert payload["work_id"] == items[3].work_id
    assert payload["source"] == {
        "id": "source/1",
        "revision": "rev-1",
        "text": "Save your changes before leaving page 1.",
        "locale": "en-US",
        "content_type": "text/plain",
    }
    assert payload["candidate"]["model_version"] == "1.0"
    assert payload["target_locale"] == "de-DE"
    assert code_of(plan.job_payload, "ja-JP", "case-0001") == dom.STATE_INVALID
    assert code_of(plan.job_payload, "de-DE", "case-9999") == dom.STATE_INVALID


# -- claims, results, health ---------------------------------------------------------------


def _claim(**changes: object) -> ClaimedCase:
    values: dict[str, object] = {
        "work_id": "benchmark-work-" + "a" * 64,
        "campaign_id": "benchmark-campaign-" + "b" * 64,
        "target_locale": "de-DE",
        "suite_case_key": "case-0000",
        "job_payload": {},
        "attempt": 1,
        "max_attempts": 3,
        "lease_owner": "w",
        "lease_token": "t",
        "lease_expires_at": 10.0,
    }
    values.update(changes)
    return ClaimedCase(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"work_id": "w"},
        {"campaign_id": "c"},
        {"attempt": 0},
        {"attempt": 4},
        {"lease_token": ""},
        {"lease_expires_at": math.nan},
        {"job_payload": None},
    ],
)
def test_forged_claims_are_refused(changes: dict[str, object]) -> None:
    assert code_of(_claim, **changes) == dom.CLAIM_INVALID


def test_forged_report_claims_are_refused() -> None:
    good = ClaimedReport("benchmark-campaign-" + "b" * 64, 1, 3, "w", "t", 5.0)
    assert "lease_token" not in repr(good)
    assert code_of(attrs.evolve, good, attempt=5) == dom.REPORT_CLAIM_INVALID
    assert code_of(attrs.evolve, good, campaign_id="x") == dom.REPORT_CLAIM_INVALID


def test_results_are_encoded_canonically() -> None:
    value, text = encode_result({"b": 1, "a": (1, 2)})
    assert value == {"a": [1, 2], "b": 1}
    assert text == '{"a":[1,2],"b":1}'
    assert code_of(encode_result, ["not", "a", "mapping"]) == dom.RESULT_INVALID
    assert code_of(encode_result, {"score": math.nan}) == dom.INPUT_INVALID
    assert code_of(check_result_size, "x" * (dom.MAX_RESULT_BYTES + 1)) == dom.RESULT_INVALID
    check_result_size("é" * (dom.MAX_RESULT_BYTES // 2))


def test_health_payload_is_the_versioned_schema() -> None:
    health = CampaignHealth(
        campaign_id="c",
        status="degraded",
        reasons=("benchmark.campaign.lease_expired",),
        counts=(("failed", 0), ("leased", 1)),
        work_count=1,
        report_ready=False,
        last_progress_at=5.0,
    )
    assert health.as_payload() == {
        "schema": "blun.website-localization-benchmark-campaign-health.v1",
        "campaign_id": "c",
        "status": "degraded",
        "reasons": ["benchmark.campaign.lease_expired"],
        "counts": {"failed": 0, "leased": 1},
        "work_count": 1,
        "report_ready": False,
        "last_progress_at": 5.0,
    }
    assert code_of(attrs.evolve, health, status="fine") == dom.STATE_INVALID
    assert code_of(attrs.evolve, health, reasons=("b", "a")) == dom.STATE_INVALID


def test_health_classification() -> None:
    assert dom.health_status([], 0) == "healthy"
    assert dom.health_status([dom.LEASE_EXPIRED], 0) == "degraded"
    assert dom.health_status([], 1) == "blocked"
    assert dom.health_status([dom.VALIDITY_EXPIRED], 0) == "blocked"
    assert dom.health_status([dom.REPORT_INVALID], 0) == "blocked"


# -- adapters ---------------------------------------------------------------------------------


def _result(plan: CampaignPlan, **changes: object) -> dict[str, object]:
    result: dict[str, object] = {
        "target_locale": "de-DE",
        "suite": {"case_key": "case-0000", "suite_sha256": plan.suite.sha256},
        "score": 0.75,
    }
    result.update(changes)
    return result


@pytest.mark.parametrize(
    "changes",
    [
        {"target_locale": "ja-JP"},
        {"suite": {"case_key": "case-0000", "suite_sha256": "0" * 64}},
        {"suite": "case-0000"},
        {"score": 1.5},
        {"score": True},
        {"score": None},
        {"passed": "yes"},
    ],
)
def test_structural_verifier_rejects(changes: dict[str, object]) -> None:
    plan = make_plan()
    with pytest.raises(ResultRejected):
        StructuralResultVerifier().verify_result(_result(plan, **changes), plan.policy)


def test_hmac_attestation() -> None:
    plan = make_plan()
    signer = HmacAttestationSigner("evaluator-1", b"k" * 32)
    verifier = HmacAttestationVerifier({"evaluator-1": b"k" * 32})
    signed = signer.sign(_result(plan), plan.policy.sha256)
    verifier.verify_result(signed, plan.policy)
    verifier.verify_result(json.loads(canonical_json(signed)), plan.policy)
    tampered = dict(signed, score=0.99)
    other_key = HmacAttestationSigner("evaluator-1", b"x" * 32).sign(
        _result(plan), plan.policy.sha256
    )
    unknown = HmacAttestationSigner("evaluator-2", b"k" * 32).sign(
        _result(plan), plan.policy.sha256
    )
    other_policy = make_plan(candidate_model_version="other")
    for bad in (tampered, other_key, unknown, _result(plan)):
        with pytest.raises(ResultRejected):
            verifier.verify_result(bad, plan.policy)
    replayed = signer.sign(_result(other_policy), other_policy.policy.sha256)
    with pytest.raises(ResultRejected):
        verifier.verify_result(replayed, plan.policy)
    with pytest.raises(ValueError):
        HmacAttestationSigner("k", b"short")


def test_default_report_is_deterministic_and_verifiable() -> None:
    plan = make_plan(cases=2, locales=("de-DE", "fr-FR"))
    results = [
        _result(
            plan,
            target_locale=locale,
            suite={"case_key": key, "suite_sha256": plan.suite.sha256},
            score=score,
        )
        for (locale, key), score in zip(
            [
                ("de-DE", "case-0000"),
                ("de-DE", "case-0001"),
                ("fr-FR", "case-0000"),
                ("fr-FR", "case-0001"),
            ],
            [1.0, 0.25, 0.5, 0.0],
            strict=True,
        )
    ]
    builder = DefaultReportBuilder()
    report = builder.build(plan.policy, plan.suite, results)
    assert report == builder.build(plan.policy, plan.suite, results)
    assert report["locales"]["de-DE"] == {
        "items": 2,
        "mean_score": 0.625,
        "pass_rate": 0.5,
        "passed": 1,
    }
    assert report["overall"] == {"items": 4, "mean_score": 0.4375, "pass_rate": 0.5, "passed": 2}
    assert report["results_sha256"] == dom.results_sha256([sha256_json(r) for r in results])
    builder.verify(report, plan.policy, plan.suite, results)
    with pytest.raises(ReportMismatch):
        builder.verify(dict(report, overall={}), plan.policy, plan.suite, results)
    with pytest.raises(ReportMismatch):
        builder.verify(report, plan.policy, plan.suite, [*results[:3], dict(results[3], score=0.1)])


# -- status, outcomes and health are validated and cannot be changed ----------------------------


def _status() -> CampaignStatus:
    return CampaignStatus(
        campaign_id="benchmark-campaign-" + "a" * 64,
        policy_sha256="a" * 64,
        suite_sha256="b" * 64,
        valid_until=10.0,
        work_count=2,
        counts={"pending": 1, "leased": 0, "retry_wait": 0, "succeeded": 1, "failed": 0},
        error_counts={"provider.down": 1},
        complete=False,
        blocked=False,
        report_finalization={
            "status": "pending",
            "attempt": 0,
            "max_attempts": 3,
            "next_attempt_at": 1.0,
            "error_code": None,
        },
        created_at=1.0,
        updated_at=2.0,
        next_due_at=1.0,
    )


def test_status_mappings_are_read_only() -> None:
    counts = {"pending": 1, "leased": 0, "retry_wait": 0, "succeeded": 1, "failed": 0}
    status = attrs.evolve(_status(), counts=counts)
    counts["failed"] = 9  # the caller's dict is copied, not shared
    assert status.counts["failed"] == 0
    for mapping in (status.counts, status.error_counts, status.report_finalization):
        with pytest.raises(TypeError):
            mapping["failed"] = 1  # type: ignore[index]
    assert status.counts == {
        "pending": 1,
        "leased": 0,
        "retry_wait": 0,
        "succeeded": 1,
        "failed": 0,
    }
    payload = status.as_payload()
    assert json.loads(json.dumps(payload)) == payload  # plain dicts again


@pytest.mark.parametrize(
    "changes",
    [
        {"campaign_id": "c"},
        {"policy_sha256": "x"},
        {"work_count": 0},
        {"counts": {"pending": 1}},
        {"counts": {"pending": -1, "leased": 0, "retry_wait": 0, "succeeded": 0, "failed": 0}},
        {"error_counts": {"Bad Code": 1}},
        {"error_counts": ["provider.down"]},
        {"complete": 1},
        {"report_finalization": {"status": "pending"}},
        {"updated_at": math.nan},
        {"next_due_at": -1.0},
        {"next_due_at": 1},
    ],
)
def test_status_is_validated(changes: dict[str, object]) -> None:
    assert code_of(attrs.evolve, _status(), **changes) == dom.STATE_INVALID


def test_outcomes_and_health_are_validated() -> None:
    outcome = CaseOutcome(
        "benchmark-work-" + "c" * 64, "de-DE", "case-1", "failed", 1, 3, 5.0, "a.b", None, None
    )
    assert code_of(attrs.evolve, outcome, work_id="w") == dom.STATE_INVALID
    assert code_of(attrs.evolve, outcome, suite_case_key="") == dom.STATE_INVALID
    report = ReportOutcome("benchmark-campaign-" + "a" * 64, "pending", 0, 3, 1.0, None, None)
    assert code_of(attrs.evolve, report, campaign_id="c") == dom.STATE_INVALID
    health = CampaignHealth("c", "healthy", (), (("failed", 0),), 1, False, None)
    assert code_of(attrs.evolve, health, counts=(("odd", 1),)) == dom.STATE_INVALID
    assert (
        code_of(attrs.evolve, health, counts=(("pending", 0), ("failed", 0))) == dom.STATE_INVALID
    )
    assert code_of(attrs.evolve, health, work_count=-1) == dom.STATE_INVALID
    assert code_of(attrs.evolve, health, report_ready="yes") == dom.STATE_INVALID
    assert code_of(attrs.evolve, health, last_progress_at=math.inf) == dom.STATE_INVALID
