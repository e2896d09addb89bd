"""The statistics comparing two campaigns agree with scipy on the same data.

McNemar's exact test against ``scipy.stats.binomtest``, the signed-rank test
against ``scipy.stats.wilcoxon`` (exact, permutation and normal regimes), the
bootstrap against a brute-force loop and ``scipy.stats.bootstrap`` with the same
generator, Holm against hand-worked values. No database.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from benchledger.domain.campaign_codes import (
    COMPARE_NO_PAIRS,
    COMPARE_PAIR_DUPLICATE,
    COMPARE_PAIR_INVALID,
    COMPARE_PVALUE_INVALID,
    COMPARE_SETTING_INVALID,
)
from benchledger.domain.comparison import (
    Flip,
    FlipDirection,
    Pair,
    WilcoxonMethod,
    compare_pairs,
    holm,
    mcnemar_exact,
    paired_bootstrap_ci,
    wilcoxon_signed_rank,
)
from benchledger.errors import CampaignBlocked

# -- helpers --------------------------------------------------------------------------


def pairs_from_counts(
    both: int, a_only: int, b_only: int, neither: int, locale: str = "de-DE"
) -> list[Pair]:
    """Pairs with these pass/fail cells (scores 1.0 for a pass, 0.0 for a fail)."""
    cells = (
        [(True, True)] * both
        + [(True, False)] * a_only
        + [(False, True)] * b_only
        + [(False, False)] * neither
    )
    return [
        Pair(locale, f"case-{i:04d}", float(pa), pa, float(pb), pb)
        for i, (pa, pb) in enumerate(cells)
    ]


def random_pairs(n: int, seed: int, locales: tuple[str, ...] = ("de-DE",)) -> list[Pair]:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    b = np.clip(a + rng.normal(0.05, 0.2, n), 0, 1)
    return [
        Pair(
            locales[i % len(locales)],
            f"case-{i:05d}",
            float(a[i]),
            bool(a[i] > 0.5),
            float(b[i]),
            bool(b[i] > 0.5),
        )
        for i in range(n)
    ]


def bootstrap_reference(d: np.ndarray, seed: int, resamples: int, level: float = 0.95):
    """The definition, one resample at a time."""
    rng = np.random.Generator(np.random.PCG64(seed))
    means = [float(np.mean(d[rng.integers(0, d.size, size=d.size)])) for _ in range(resamples)]
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


def refused(code: str):
    return pytest.raises(CampaignBlocked, match=f"^{code}$")


# -- McNemar ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_pass_b_fail", "a_fail_b_pass"),
    [(0, 1), (1, 0), (0, 5), (3, 15), (15, 3), (7, 7), (7, 8), (10, 27), (0, 40), (25, 26)],
)
def test_mcnemar_is_scipys_two_sided_binomial_test(a_pass_b_fail: int, a_fail_b_pass: int) -> None:
    n = a_pass_b_fail + a_fail_b_pass
    expected = stats.binomtest(a_fail_b_pass, n, 0.5).pvalue
    assert mcnemar_exact(a_pass_b_fail, a_fail_b_pass) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_agrees_with_scipy_on_every_small_table() -> None:
    for b in range(40):
        for c in range(40):
            if b + c:
                expected = stats.binomtest(b, b + c, 0.5).pvalue
                assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12), (b, c)


@pytest.mark.parametrize(("b", "c"), [(4_000, 4_200), (40_000, 41_000), (1_000, 2_000)])
def test_mcnemar_agrees_with_scipy_on_large_tables(b: int, c: int) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    stats_ = compare_pairs(pairs_from_counts(5, 0, 0, 3)).overall
    assert (stats_.discordant, stats_.mcnemar_p) == (0, 1.0)


def test_the_published_example_paired_against_unpaired() -> None:
    """100 cases: A passes 32, B passes 44; 29 pass in both, 3 only in A, 15 only in B.

    The unpaired two-proportion z-test (what one harness does) gives p = 0.080;
    McNemar's exact test on the 18 discordant pairs gives p = 0.008.
    """
    pairs = pairs_from_counts(both=29, a_only=3, b_only=15, neither=53)
    overall = compare_pairs(pairs, resamples=200).overall
    assert (overall.pairs, overall.passed_a, overall.passed_b) == (100, 32, 44)
    assert (overall.a_pass_b_fail, overall.a_fail_b_pass) == (3, 15)
    pooled = (32 + 44) / 200
    z = (0.44 - 0.32) / math.sqrt(pooled * (1 - pooled) * 2 / 100)
    assert round(2 * stats.norm.sf(z), 3) == 0.080
    assert overall.mcnemar_p == pytest.approx(stats.binomtest(3, 18, 0.5).pvalue, rel=1e-12)
    assert round(overall.mcnemar_p, 3) == 0.008
    assert overall.pass_rate_difference == pytest.approx(0.12)
    assert (overall.pass_rate_a, overall.pass_rate_b) == (0.32, 0.44)


# -- Wilcoxon -----------------------------------------------------------------------------


def _check_wilcoxon(a: np.ndarray, b: np.ndarray, method: WilcoxonMethod) -> None:
    ours = wilcoxon_signed_rank(b - a)
    theirs = stats.wilcoxon(b, a)
    assert ours.method is method
    assert ours.pvalue == pytest.approx(float(theirs.pvalue), rel=1e-10, abs=0)
    assert ours.statistic == float(theirs.statistic)


@pytest.mark.parametrize("n", [1, 2, 5, 9, 20, 37, 50])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wilcoxon_exact_regime_matches_scipy(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    b = a + rng.normal(0.1, 0.3, n)
    _check_wilcoxon(a, b, WilcoxonMethod.EXACT)


@pytest.mark.parametrize("n", [2, 6, 10, 13])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_wilcoxon_small_samples_with_ties_and_zeros_match_scipys_permutation(
    n: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n).astype(float)
    b = a + rng.integers(-2, 4, n)
    if not np.any(b != a):
        b[0] += 1.0
    if np.unique(np.abs(b - a)[b != a]).size == np.count_nonzero(b != a) and np.all(b != a):
        b[0] = a[0]  # a zero, so the permutation regime applies
    _check_wilcoxon(a, b, WilcoxonMethod.PERMUTATION)


@pytest.mark.parametrize(
    ("n", "kind"),
    [
        (14, "ties"),
        (30, "zeros"),
        (50, "ties"),
        (51, "continuous"),
        (200, "ties"),
        (5_000, "zeros"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_wilcoxon_normal_approximation_matches_scipy(n: int, kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    if kind == "continuous":
        b = a + rng.normal(0.05, 0.3, n)
    elif kind == "ties":
        a = np.round(a, 1)
        b = a + rng.integers(-3, 5, n) / 10
        b[0] = a[0] + 0.3
        b[1] = a[1] + 0.3  # at least one tie
    else:
        b = a + rng.integers(-1, 3, n) * 0.25
        b[0] = a[0]  # at least one zero
    _check_wilcoxon(a, b, WilcoxonMethod.APPROXIMATE)


def test_wilcoxon_when_every_difference_is_zero_is_one_and_undefined() -> None:
    result = wilcoxon_signed_rank([0.0, 0.0, 0.0])
    assert (result.pvalue, result.method, result.nonzero, result.statistic) == (
        1.0,
        WilcoxonMethod.UNDEFINED,
        0,
        None,
    )


def test_wilcoxon_drops_zero_differences() -> None:
    with_zeros = wilcoxon_signed_rank([0.0] * 60 + [1.0, 2.0, -3.0, 4.0, 5.0, 6.0])
    assert with_zeros.nonzero == 6
    assert with_zeros.pvalue == pytest.approx(
        stats.wilcoxon([0.0] * 60 + [1.0, 2.0, -3.0, 4.0, 5.0, 6.0]).pvalue, rel=1e-10
    )


# -- bootstrap ----------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "seed"), [(1, 0), (7, 3), (40, 11), (333, 2024)])
def test_bootstrap_is_the_brute_force_loop_with_the_same_seed(n: int, seed: int) -> None:
    d = np.random.default_rng(seed + 1).normal(0.2, 1.0, n)
    interval = paired_bootstrap_ci(d, seed=seed, resamples=2_000)
    low, high = bootstrap_reference(d, seed, 2_000)
    assert interval.low == pytest.approx(low, rel=1e-12, abs=1e-15)
    assert interval.high == pytest.approx(high, rel=1e-12, abs=1e-15)
    assert interval.level == 0.95


def test_bootstrap_is_scipys_percentile_bootstrap_given_the_same_generator() -> None:
    d = np.random.default_rng(5).normal(0.1, 0.5, 57)
    interval = paired_bootstrap_ci(d, seed=42, resamples=3_000, confidence=0.9)
    theirs = stats.bootstrap(
        (d,),
        np.mean,
        n_resamples=3_000,
        method="percentile",
        confidence_level=0.9,
        rng=np.random.Generator(np.random.PCG64(42)),
    ).confidence_interval
    assert interval.low == pytest.approx(float(theirs.low), rel=1e-12)
    assert interval.high == pytest.approx(float(theirs.high), rel=1e-12)


def test_bootstrap_is_reproducible_and_independent_of_its_chunks() -> None:
    d = np.random.default_rng(9).normal(0.0, 1.0, 101)  # odd, so draws cannot pair up
    reference = paired_bootstrap_ci(d, seed=7, resamples=1_001)
    for rows in (1, 2, 3, 64, 1_001, 5_000):
        assert paired_bootstrap_ci(d, seed=7, resamples=1_001, chunk_rows=rows) == reference
    assert paired_bootstrap_ci(d, seed=7, resamples=1_001) == reference
    assert paired_bootstrap_ci(d, seed=8, resamples=1_001) != reference


def test_compare_pairs_default_resamples_are_ten_thousand_and_reproducible() -> None:
    pairs = random_pairs(60, 4)
    first = compare_pairs(pairs, seed=5)
    assert first.resamples == 10_000
    d = np.array([p.score_b - p.score_a for p in sorted(pairs, key=lambda p: p.key)])
    low, high = bootstrap_reference(d, 5, 10_000)
    assert first.overall.interval.low == pytest.approx(low, rel=1e-12)
    assert first.overall.interval.high == pytest.approx(high, rel=1e-12)
    assert compare_pairs(list(reversed(pairs)), seed=5) == first


def test_the_overall_interval_is_the_bootstrap_stratified_by_locale() -> None:
    locales = ("de-DE", "fr-FR", "ja-JP")
    pairs = random_pairs(90, 11, locales)
    result = compare_pairs(pairs, seed=3, resamples=2_000)
    ordered = sorted(pairs, key=lambda p: p.key)
    weighted = np.zeros(2_000)
    for locale in locales:
        d = np.array([p.score_b - p.score_a for p in ordered if p.locale == locale])
        rng = np.random.Generator(np.random.PCG64(3))
        means = np.array([d[rng.integers(0, d.size, size=d.size)].mean() for _ in range(2_000)])
        low, high = np.quantile(means, [0.025, 0.975])
        assert result.locale(locale).stats.interval.low == pytest.approx(low, rel=1e-12)
        assert result.locale(locale).stats.interval.high == pytest.approx(high, rel=1e-12)
        weighted += means * d.size / len(ordered)
    low, high = np.quantile(weighted, [0.025, 0.975])
    assert result.overall.interval.low == pytest.approx(low, rel=1e-12)
    assert result.overall.interval.high == pytest.approx(high, rel=1e-12)
    # A locale's interval does not depend on the others.
    alone = compare_pairs([p for p in pairs if p.locale == "fr-FR"], seed=3, resamples=2_000)
    assert alone.overall.interval == result.locale("fr-FR").stats.interval


# -- Holm -----------------------------------------------------------------------------------


def test_holm_hand_worked() -> None:
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx((0.03, 0.06, 0.06, 0.02))
    # capped at 1, and never below an earlier adjusted value
    assert holm([0.6, 0.7, 0.01]) == pytest.approx((1.0, 1.0, 0.03))
    assert holm([0.02, 0.02, 0.9]) == pytest.approx((0.06, 0.06, 0.9))
    assert holm([0.5]) == (0.5,)
    assert holm([]) == ()


def test_holm_is_applied_across_locales() -> None:
    pairs = (
        pairs_from_counts(20, 0, 9, 5, "de-DE")
        + pairs_from_counts(20, 2, 3, 5, "fr-FR")
        + pairs_from_counts(20, 1, 8, 5, "ja-JP")
    )
    result = compare_pairs(pairs, resamples=100)
    raw = [entry.stats.mcnemar_p for entry in result.locales]
    assert [entry.locale for entry in result.locales] == ["de-DE", "fr-FR", "ja-JP"]
    assert raw == pytest.approx([stats.binomtest(0, 9).pvalue, 1.0, stats.binomtest(1, 9).pvalue])
    assert [entry.mcnemar_p_holm for entry in result.locales] == pytest.approx(holm(raw))
    assert [entry.wilcoxon_p_holm for entry in result.locales] == pytest.approx(
        holm([entry.stats.wilcoxon_p for entry in result.locales])
    )
    assert result.locales[0].mcnemar_p_holm == pytest.approx(3 * raw[0])


# -- compare_pairs --------------------------------------------------------------------------


def test_compare_pairs_numbers_and_flips() -> None:
    pairs = [
        Pair("de-DE", "a", 0.9, True, 0.2, False),
        Pair("de-DE", "b", 0.1, False, 0.8, True),
        Pair("de-DE", "c", 0.5, True, 0.7, True),
        Pair("fr-FR", "a", 0.3, False, 0.9, True),
    ]
    result = compare_pairs(pairs, resamples=500)
    overall = result.overall
    assert (overall.pairs, overall.passed_a, overall.passed_b) == (4, 2, 3)
    assert (overall.a_pass_b_fail, overall.a_fail_b_pass) == (1, 2)
    assert overall.mean_score_a == pytest.approx(0.45)
    assert overall.mean_score_b == pytest.approx(0.65)
    assert overall.mean_difference == pytest.approx(0.2)
    assert overall.pass_rate_difference == pytest.approx(0.25)
    assert result.flips == (
        Flip("de-DE", "a", FlipDirection.A_ONLY),
        Flip("de-DE", "b", FlipDirection.B_ONLY),
        Flip("fr-FR", "a", FlipDirection.B_ONLY),
    )
    assert result.flip_keys == [("de-DE", "a"), ("de-DE", "b"), ("fr-FR", "a")]
    assert result.locale("fr-FR").stats.pairs == 1
    document = result.as_document()
    assert document["difference"] == "b_minus_a"
    assert document["overall"]["mean_difference"] == overall.mean_difference
    assert [flip["direction"] for flip in document["flips"]] == ["a_only", "b_only", "b_only"]


def test_one_locale_is_the_overall_and_holm_leaves_it() -> None:
    result = compare_pairs(random_pairs(80, 1), resamples=300)
    (only,) = result.locales
    assert only.stats == result.overall
    assert only.mcnemar_p_holm == result.overall.mcnemar_p
    assert only.wilcoxon_p_holm == result.overall.wilcoxon_p


def test_a_locales_numbers_do_not_depend_on_the_other_locales() -> None:
    both = random_pairs(90, 2, ("de-DE", "fr-FR"))
    alone = compare_pairs([p for p in both if p.locale == "de-DE"], resamples=400)
    together = compare_pairs(both, resamples=400)
    assert together.locale("de-DE").stats == alone.overall


def test_all_ties() -> None:
    pairs = [Pair("de-DE", f"k{i}", 0.5, True, 0.5, True) for i in range(12)]
    overall = compare_pairs(pairs, resamples=200).overall
    assert (overall.mean_difference, overall.interval.low, overall.interval.high) == (0, 0, 0)
    assert overall.wilcoxon.method is WilcoxonMethod.UNDEFINED
    assert (overall.wilcoxon_p, overall.mcnemar_p) == (1.0, 1.0)
    assert compare_pairs(pairs, resamples=200).flips == ()


def test_refusals_are_coded() -> None:
    good = Pair("de-DE", "k", 0.5, True, 0.5, True)
    with refused(COMPARE_NO_PAIRS):
        compare_pairs([])
    with refused(COMPARE_NO_PAIRS):
        paired_bootstrap_ci([])
    with refused(COMPARE_NO_PAIRS):
        wilcoxon_signed_rank([])
    with refused(COMPARE_PAIR_DUPLICATE):
        compare_pairs([good, Pair("de-DE", "k", 0.1, False, 0.2, False)])
    with refused(COMPARE_PAIR_INVALID):
        compare_pairs([good, ("de-DE", "x", 0.1, False, 0.2, False)])  # type: ignore[list-item]
    with refused(COMPARE_PAIR_INVALID):
        compare_pairs("de-DE")  # type: ignore[arg-type]
    for bad in (
        dict(locale="not a locale"),
        dict(locale=""),
        dict(case_key=""),
        dict(case_key=" padded "),
        dict(score_a=math.nan),
        dict(score_b=math.inf),
        dict(score_a=True),
        dict(score_b="0.5"),
        dict(score_a=10**400),
        dict(passed_a=1),
        dict(passed_b=None),
    ):
        fields = dict(
            locale="de-DE", case_key="k", score_a=0.1, passed_a=True, score_b=0.2, passed_b=False
        )
        fields.update(bad)
        with refused(COMPARE_PAIR_INVALID):
            Pair(**fields)  # type: ignore[arg-type]
    for setting in (
        dict(seed=-1),
        dict(seed=1.5),
        dict(seed=True),
        dict(seed=2**128),
        dict(resamples=0),
        dict(resamples=1_000_001),
        dict(resamples=10.0),
        dict(confidence=1.0),
        dict(confidence=0),
        dict(confidence=math.nan),
    ):
        with refused(COMPARE_SETTING_INVALID):
            compare_pairs([good], **setting)  # type: ignore[arg-type]
    with refused(COMPARE_SETTING_INVALID):
        paired_bootstrap_ci([1.0, math.nan])
    with refused(COMPARE_SETTING_INVALID):
        paired_bootstrap_ci([[1.0, 2.0]])  # type: ignore[list-item]
    with refused(COMPARE_SETTING_INVALID):
        paired_bootstrap_ci([1.0], chunk_rows=0)
    with refused(COMPARE_SETTING_INVALID):
        mcnemar_exact(-1, 2)
    with refused(COMPARE_SETTING_INVALID):
        mcnemar_exact(1, 2.0)  # type: ignore[arg-type]
    for pvalues in ([0.1, 1.5], [-0.1], [math.nan], [True], "0.5", 0.5):
        with refused(COMPARE_PVALUE_INVALID):
            holm(pvalues)  # type: ignore[arg-type]


def test_the_new_codes_are_documented() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text("utf-8")
    for code in (
        COMPARE_NO_PAIRS,
        COMPARE_PAIR_DUPLICATE,
        COMPARE_PAIR_INVALID,
        COMPARE_PVALUE_INVALID,
        COMPARE_SETTING_INVALID,
    ):
        assert f"| `{code}` |" in text


# -- properties -----------------------------------------------------------------------------

scores = st.floats(min_value=0.0, max_value=1.0, allow_nan=False).map(lambda x: round(x, 2))
outcomes = st.tuples(scores, st.booleans(), scores, st.booleans())
locale_names = st.sampled_from(["de-DE", "fr-FR", "ja-JP"])


@st.composite
def pair_lists(draw: st.DrawFn) -> list[Pair]:
    rows = draw(st.lists(st.tuples(locale_names, outcomes), min_size=1, max_size=40))
    return [
        Pair(loc, f"case-{i}", sa, pa, sb, pb) for i, (loc, (sa, pa, sb, pb)) in enumerate(rows)
    ]


@settings(max_examples=60, deadline=None, database=None)
@given(pair_lists(), st.integers(0, 2**64))
def test_pvalues_are_probabilities(pairs: list[Pair], seed: int) -> None:
    result = compare_pairs(pairs, seed=seed, resamples=200)
    groups = [result.overall, *(entry.stats for entry in result.locales)]
    for group in groups:
        assert 0.0 <= group.mcnemar_p <= 1.0
        assert 0.0 <= group.wilcoxon_p <= 1.0
        assert group.interval.low <= group.interval.high
    for entry in result.locales:
        assert entry.stats.mcnemar_p <= entry.mcnemar_p_holm <= 1.0
        assert entry.stats.wilcoxon_p <= entry.wilcoxon_p_holm <= 1.0


@settings(max_examples=60, deadline=None, database=None)
@given(pair_lists(), st.integers(0, 1000))
def test_swapping_a_and_b_negates_the_differences_and_keeps_the_pvalues(
    pairs: list[Pair], seed: int
) -> None:
    forward = compare_pairs(pairs, seed=seed, resamples=200)
    backward = compare_pairs([p.swapped() for p in pairs], seed=seed, resamples=200)
    for there, back in [
        (forward.overall, backward.overall),
        *((f.stats, b.stats) for f, b in zip(forward.locales, backward.locales, strict=True)),
    ]:
        assert back.mean_difference == -there.mean_difference
        assert back.pass_rate_difference == -there.pass_rate_difference
        assert back.interval.low == pytest.approx(-there.interval.high, abs=1e-12)
        assert back.interval.high == pytest.approx(-there.interval.low, abs=1e-12)
        assert (back.a_pass_b_fail, back.a_fail_b_pass) == (
            there.a_fail_b_pass,
            there.a_pass_b_fail,
        )
        assert back.mcnemar_p == there.mcnemar_p
        assert back.wilcoxon_p == there.wilcoxon_p
    assert [f.key for f in backward.flips] == forward.flip_keys
    assert [f.direction for f in backward.flips] == [
        FlipDirection.B_ONLY if f.direction is FlipDirection.A_ONLY else FlipDirection.A_ONLY
        for f in forward.flips
    ]


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.lists(st.floats(0.01, 1.0).map(lambda x: round(x, 3)), min_size=1, max_size=30),
    st.integers(0, 1000),
)
def test_the_interval_of_symmetric_differences_contains_their_mean(
    magnitudes: list[float], seed: int
) -> None:
    """Differences +x and -x for each x: the mean difference is 0 and the interval holds it."""
    pairs = []
    for i, x in enumerate(magnitudes):
        pairs.append(Pair("de-DE", f"up-{i}", 0.0, False, x, True))
        pairs.append(Pair("de-DE", f"down-{i}", x, True, 0.0, False))
    random.Random(seed).shuffle(pairs)
    overall = compare_pairs(pairs, seed=seed, resamples=500).overall
    assert overall.mean_difference == pytest.approx(0.0, abs=1e-12)
    assert overall.interval.low <= overall.mean_difference <= overall.interval.high
    assert overall.mcnemar_p == 1.0
    assert overall.wilcoxon_p == 1.0
