"""``compare`` pairs two campaigns over one suite by (locale, case key), says what it
dropped and why, and gives the domain's statistics; ``load_report(provisional=True)``
summarizes an unfinished campaign without storing anything."""

from __future__ import annotations

import pytest
from scipy import stats as scipy_stats

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_comparison import DropReason
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.services.campaigns import CampaignService
from helpers import every_row, refused

from .helpers import make_plan, make_policy, result_for


def _score(campaign: str, locale: str, key: str) -> float:
    index = int(key.rsplit("-", 1)[1])
    base = (index * 37 % 100) / 100
    bump = 0.15 if campaign == "b" and index % 3 else 0.0
    return min(1.0, base + bump + (0.05 if locale == "fr-FR" else 0.0))


def _work(service: CampaignService, cid: str, campaign: str, *, fail_keys: set[str]) -> None:
    while (claim := service.claim(cid, f"w-{campaign}")) is not None:
        if claim.suite_case_key in fail_keys:
            service.fail(claim, "example.broken", retryable=False)
            continue
        score = _score(campaign, claim.target_locale, claim.suite_case_key)
        service.complete(claim, result_for(claim, score=score))


@pytest.fixture
def two(service: CampaignService) -> tuple[str, str, CampaignPlan]:
    plan = make_plan(cases=20)
    other = make_policy(plan.suite, candidate_model_id="model-b")
    a = service.create(plan.policy, plan.suite, name="A")
    b = service.create(other, plan.suite, name="B")
    _work(service, a, "a", fail_keys={"case-0003"})
    _work(service, b, "b", fail_keys={"case-0007"})
    return a, b, plan


def test_compare_pairs_items_both_completed_and_counts_the_rest(
    ledger_db: Database, service: CampaignService, two: tuple[str, str, CampaignPlan]
) -> None:
    a, b, plan = two
    before = every_row(ledger_db)
    result = service.compare(a, b, seed=7, resamples=2_000)
    assert every_row(ledger_db) == before  # a read
    assert result.a.campaign_id == a and result.b.name == "B"
    assert result.b.candidate.model_id == "model-b"
    assert result.suite_sha256 == plan.suite.sha256
    # 2 locales x 20 cases; case-0003 failed in A, case-0007 in B (both locales).
    assert result.paired == 36
    assert result.dropped[DropReason.A_NOT_SUCCEEDED] == 2
    assert result.dropped[DropReason.B_NOT_SUCCEEDED] == 2
    assert result.dropped_total == 4
    comparison = result.comparison
    assert comparison is not None
    assert [entry.locale for entry in comparison.locales] == ["de-DE", "fr-FR"]
    overall = comparison.overall
    keys = [
        (locale, f"case-{i:04d}")
        for locale in ("de-DE", "fr-FR")
        for i in range(20)
        if i not in (3, 7)
    ]
    diffs = [_score("b", *k) - _score("a", *k) for k in keys]
    assert overall.pairs == 36
    assert overall.mean_difference == pytest.approx(sum(diffs) / len(diffs))
    assert overall.wilcoxon.pvalue == pytest.approx(
        scipy_stats.wilcoxon(
            [_score("b", *k) for k in keys], [_score("a", *k) for k in keys]
        ).pvalue
    )
    assert overall.interval.low <= overall.mean_difference <= overall.interval.high
    again = service.compare(a, b, seed=7, resamples=2_000)
    assert again == result  # seeded: reproducible
    swapped = service.compare(b, a, seed=7, resamples=2_000)
    assert swapped.comparison is not None
    assert swapped.comparison.overall.mean_difference == pytest.approx(-overall.mean_difference)
    assert swapped.dropped[DropReason.A_NOT_SUCCEEDED] == 2


def test_compare_refuses_campaigns_over_different_suites(
    ledger_db: Database, service: CampaignService, two: tuple[str, str, CampaignPlan]
) -> None:
    a, _, _ = two
    other = make_plan(cases=3)
    c = service.create(other.policy, other.suite)
    with refused(ledger_db, dom.SUITE_DIFFERS):
        service.compare(a, c)
    with refused(ledger_db, dom.NOT_FOUND):
        service.compare(a, "benchmark-campaign-" + "f" * 64)
    with refused(ledger_db, dom.NOT_FOUND):
        service.compare("x", a)
    with refused(ledger_db, dom.COMPARE_SETTING_INVALID):
        service.compare(a, a, resamples=0)


def test_compare_without_pairs_says_so(service: CampaignService) -> None:
    plan = make_plan(cases=2)
    a = service.create(plan.policy, plan.suite)
    b = service.create(make_policy(plan.suite, candidate_model_id="other"), plan.suite)
    result = service.compare(a, b)
    assert result.paired == 0 and result.comparison is None
    assert result.dropped[DropReason.NEITHER_SUCCEEDED] == plan.work_count
    assert result.as_payload()["paired"] == 0


def test_a_provisional_report_summarizes_what_succeeded_so_far(
    ledger_db: Database, service: CampaignService, two: tuple[str, str, CampaignPlan]
) -> None:
    a, _, _ = two
    with refused(ledger_db, dom.INCOMPLETE):
        service.load_report(a)  # blocked: one failed item per locale
    before = every_row(ledger_db)
    report = service.load_report(a, provisional=True)
    assert every_row(ledger_db) == before  # never stored
    assert report["provisional"] is True and report["name"] == "A"
    de = report["locales"]["de-DE"]
    assert (de["items"], de["succeeded"]) == (20, 19)
    scores = [_score("a", "de-DE", f"case-{i:04d}") for i in range(20) if i != 3]
    assert de["mean_score"] == pytest.approx(sum(scores) / 19, abs=1e-6)
    assert de["passed"] == sum(score >= 0.5 for score in scores)
    assert report["overall"]["items"] == 40 and report["overall"]["succeeded"] == 38
