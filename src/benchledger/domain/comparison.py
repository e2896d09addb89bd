"""Comparing two campaigns over one suite: paired statistics, as pure functions.

Campaign A and campaign B evaluated the same cases; each :class:`Pair` is one item
(locale, case key) with both outcomes. Everything here is a *difference B - A*:
positive means B scored higher or passed more. Per locale and overall,
:func:`compare_pairs` gives

- pass rates and their difference, the discordant counts (A pass / B fail,
  A fail / B pass) and McNemar's exact test on them (:func:`mcnemar_exact`);
- mean scores, the mean paired difference and its paired-bootstrap percentile
  interval (:func:`paired_bootstrap_ci`), and the Wilcoxon signed-rank test on
  the paired differences (:func:`wilcoxon_signed_rank`);
- per locale, both p-values again after Holm's step-down correction across the
  locales (:func:`holm`);

and the flips: the cases that pass in one campaign and fail in the other.

Each number is the one scipy / statsmodels compute on the same data
(``binomtest(k, n, 0.5)``, ``wilcoxon(b, a)`` with its defaults,
``bootstrap(..., method="percentile")`` given the same generator, and
``multipletests(method="holm")``); tests/campaign/test_comparison_stats.py holds
them to it. Nothing here touches a database: the services gather the pairs.
"""

from __future__ import annotations

import enum
import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from benchledger.domain.campaign import LOCALE, blocked, is_identifier
from benchledger.domain.campaign_codes import (
    COMPARE_NO_PAIRS,
    COMPARE_PAIR_DUPLICATE,
    COMPARE_PAIR_INVALID,
    COMPARE_PVALUE_INVALID,
    COMPARE_SETTING_INVALID,
)

#: Bootstrap resamples unless told otherwise.
DEFAULT_RESAMPLES: Final = 10_000
MAX_RESAMPLES: Final = 1_000_000
DEFAULT_CONFIDENCE: Final = 0.95
#: Seeds are what ``numpy.random.PCG64`` takes: non-negative integers below 2**128.
MAX_SEED: Final = 2**128 - 1
#: scipy's ``wilcoxon(method="auto")``: the exact null distribution up to this many
#: pairs (zeros included) when no difference is zero and none are tied ...
WILCOXON_EXACT_MAX: Final = 50
#: ... and, with zeros or ties, every sign pattern enumerated up to this many pairs.
WILCOXON_PERMUTATION_MAX: Final = 13
#: Index draws held at once by the bootstrap (about 8 MB of indices, 8 MB of scores).
_CHUNK_ELEMENTS: Final = 1 << 20

FloatArray = npt.NDArray[np.float64]


class FlipDirection(enum.StrEnum):
    """Which campaign a flipped case passes in."""

    #: Passes in A, fails in B: a regression from A to B.
    A_ONLY = "a_only"
    #: Fails in A, passes in B: an improvement from A to B.
    B_ONLY = "b_only"


class WilcoxonMethod(enum.StrEnum):
    """How the signed-rank p-value was computed (what ``scipy.stats.wilcoxon`` picks)."""

    #: The exact null distribution: at most 50 pairs, no zero difference, no ties.
    EXACT = "exact"
    #: Every sign pattern of the differences enumerated: at most 13 pairs, with zeros or ties.
    PERMUTATION = "permutation"
    #: The normal approximation with tie correction, no continuity correction.
    APPROXIMATE = "approximate"
    #: Every difference is zero: no test (the p-value is 1.0).
    UNDEFINED = "undefined"


# -- validation at the boundary ---------------------------------------------------


def _real(value: object) -> float | None:
    """A finite number (not a bool) as a float; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def _check_locale(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or LOCALE.fullmatch(value) is None:
        raise blocked(COMPARE_PAIR_INVALID)


def _check_key(_instance: object, _attribute: object, value: Any) -> None:
    if not is_identifier(value):
        raise blocked(COMPARE_PAIR_INVALID)


def _check_score(_instance: object, _attribute: object, value: Any) -> None:
    if _real(value) is None:
        raise blocked(COMPARE_PAIR_INVALID)


def _check_passed(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, bool):
        raise blocked(COMPARE_PAIR_INVALID)


def _count(value: object, code: str = COMPARE_SETTING_INVALID) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise blocked(code)
    return value


def _seed(value: object) -> int:
    seed = _count(value)
    if seed > MAX_SEED:
        raise blocked(COMPARE_SETTING_INVALID)
    return seed


def _resamples(value: object) -> int:
    resamples = _count(value)
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise blocked(COMPARE_SETTING_INVALID)
    return resamples


def _confidence(value: object) -> float:
    level = _real(value)
    if level is None or not 0 < level < 1:
        raise blocked(COMPARE_SETTING_INVALID)
    return level


def _pvalue(value: object) -> float:
    p = _real(value)
    if p is None or not 0 <= p <= 1:
        raise blocked(COMPARE_PVALUE_INVALID)
    return p


def _differences(values: Sequence[float] | FloatArray) -> FloatArray:
    """Paired differences as a 1-D float64 array: finite numbers, at least one."""
    if isinstance(values, str | bytes):
        raise blocked(COMPARE_SETTING_INVALID)
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise blocked(COMPARE_SETTING_INVALID) from None
    if array.ndim != 1 or not np.isfinite(array).all():
        raise blocked(COMPARE_SETTING_INVALID)
    if array.size == 0:
        raise blocked(COMPARE_NO_PAIRS)
    return array


# -- values -----------------------------------------------------------------------


@attrs.frozen
class Pair:
    """One item both campaigns evaluated: its key and each campaign's outcome.

    ``locale`` is a locale tag, ``case_key`` a suite case key; scores are finite
    numbers (any scale, the same in both campaigns), ``passed_*`` booleans.
    Anything else is refused with ``benchmark.campaign.compare.pair_invalid``.
    """

    locale: str = attrs.field(validator=_check_locale)
    case_key: str = attrs.field(validator=_check_key)
    score_a: float = attrs.field(validator=_check_score)
    passed_a: bool = attrs.field(validator=_check_passed)
    score_b: float = attrs.field(validator=_check_score)
    passed_b: bool = attrs.field(validator=_check_passed)

    @property
    def key(self) -> tuple[str, str]:
        return (self.locale, self.case_key)

    def swapped(self) -> Pair:
        """The same item with A and B exchanged."""
        return Pair(
            self.locale, self.case_key, self.score_b, self.passed_b, self.score_a, self.passed_a
        )


@attrs.frozen
class Interval:
    """A bootstrap percentile confidence interval ``[low, high]`` at ``level``."""

    low: float
    high: float
    level: float

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high


@attrs.frozen
class SignedRank:
    """The Wilcoxon signed-rank test on paired differences (zeros dropped).

    ``statistic`` is scipy's: the smaller of the positive and negative rank sums
    (None when every difference is zero); ``nonzero`` the differences ranked.
    """

    pvalue: float
    method: WilcoxonMethod
    nonzero: int
    statistic: float | None


@attrs.frozen
class Flip:
    """A case that passes in one campaign and fails in the other."""

    locale: str
    case_key: str
    direction: FlipDirection

    @property
    def key(self) -> tuple[str, str]:
        return (self.locale, self.case_key)


@attrs.frozen
class ComparisonStats:
    """A group of pairs (one locale, or all of them) compared; differences are B - A."""

    pairs: int
    passed_a: int
    passed_b: int
    #: Discordant pairs: passed in A and failed in B ...
    a_pass_b_fail: int
    #: ... and failed in A, passed in B.
    a_fail_b_pass: int
    #: McNemar's exact test: two-sided binomial(discordant, 1/2) on ``a_fail_b_pass``.
    mcnemar_p: float
    mean_score_a: float
    mean_score_b: float
    #: The mean of ``score_b - score_a`` over the pairs.
    mean_difference: float
    #: The paired-bootstrap percentile interval of ``mean_difference``.
    interval: Interval
    wilcoxon: SignedRank

    def __attrs_post_init__(self) -> None:
        if not (
            self.pairs >= 1
            and 0 <= self.passed_a <= self.pairs
            and 0 <= self.passed_b <= self.pairs
            and self.passed_a - self.a_pass_b_fail == self.passed_b - self.a_fail_b_pass >= 0
        ):
            raise blocked(COMPARE_PAIR_INVALID)

    @property
    def pass_rate_a(self) -> float:
        return self.passed_a / self.pairs

    @property
    def pass_rate_b(self) -> float:
        return self.passed_b / self.pairs

    @property
    def pass_rate_difference(self) -> float:
        """``pass_rate_b - pass_rate_a``: (B-only passes - A-only passes) / pairs."""
        return (self.a_fail_b_pass - self.a_pass_b_fail) / self.pairs

    @property
    def discordant(self) -> int:
        return self.a_pass_b_fail + self.a_fail_b_pass

    @property
    def wilcoxon_p(self) -> float:
        return self.wilcoxon.pvalue

    def as_document(self) -> dict[str, Any]:
        """Plain JSON data (for ``--json``)."""
        return {
            "pairs": self.pairs,
            "passed_a": self.passed_a,
            "passed_b": self.passed_b,
            "pass_rate_a": self.pass_rate_a,
            "pass_rate_b": self.pass_rate_b,
            "pass_rate_difference": self.pass_rate_difference,
            "a_pass_b_fail": self.a_pass_b_fail,
            "a_fail_b_pass": self.a_fail_b_pass,
            "mcnemar_p": self.mcnemar_p,
            "mean_score_a": self.mean_score_a,
            "mean_score_b": self.mean_score_b,
            "mean_difference": self.mean_difference,
            "interval": {
                "low": self.interval.low,
                "high": self.interval.high,
                "level": self.interval.level,
            },
            "wilcoxon_p": self.wilcoxon.pvalue,
            "wilcoxon_method": str(self.wilcoxon.method),
            "wilcoxon_statistic": self.wilcoxon.statistic,
            "wilcoxon_nonzero": self.wilcoxon.nonzero,
        }


@attrs.frozen
class LocaleComparison:
    """One locale's statistics, and its p-values Holm-adjusted across the locales."""

    locale: str
    stats: ComparisonStats
    mcnemar_p_holm: float
    wilcoxon_p_holm: float

    def as_document(self) -> dict[str, Any]:
        return {
            "locale": self.locale,
            **self.stats.as_document(),
            "mcnemar_p_holm": self.mcnemar_p_holm,
            "wilcoxon_p_holm": self.wilcoxon_p_holm,
        }


@attrs.frozen
class Comparison:
    """What :func:`compare_pairs` found: overall, per locale (sorted), and the flips."""

    overall: ComparisonStats
    locales: tuple[LocaleComparison, ...]
    flips: tuple[Flip, ...]
    seed: int
    resamples: int

    @property
    def flip_keys(self) -> list[tuple[str, str]]:
        return [flip.key for flip in self.flips]

    def locale(self, name: str) -> LocaleComparison:
        for entry in self.locales:
            if entry.locale == name:
                return entry
        raise KeyError(name)

    def as_document(self) -> dict[str, Any]:
        return {
            "difference": "b_minus_a",
            "seed": self.seed,
            "resamples": self.resamples,
            "overall": self.overall.as_document(),
            "locales": [entry.as_document() for entry in self.locales],
            "flips": [
                {"locale": f.locale, "case_key": f.case_key, "direction": str(f.direction)}
                for f in self.flips
            ],
        }


# -- the statistics ---------------------------------------------------------------


def mcnemar_exact(a_pass_b_fail: int, a_fail_b_pass: int) -> float:
    """McNemar's exact test: the two-sided binomial p-value of the discordant pairs.

    Under "A and B pass equally often", each discordant pair is A's or B's with
    probability 1/2; the p-value is ``scipy.stats.binomtest(k, n, 0.5).pvalue``
    with ``n`` the discordant pairs and ``k`` either count: ``min(1, 2 P(X <= min))``
    for ``X ~ Binomial(n, 1/2)``, computed in exact integers (to float precision).
    1.0 when there are no discordant pairs.
    """
    b = _count(a_pass_b_fail)
    c = _count(a_fail_b_pass)
    n = b + c
    k = min(b, c)
    if n == 0 or 2 * k == n:
        return 1.0
    # P(X <= k) * 2**n = sum of C(n, i) for i <= k, summed downwards from k. Terms shrink
    # as i falls; stop once the rest (fewer than n terms, each below ``term``) cannot
    # reach the float's last bit.
    term = math.comb(n, k)
    total = term
    i = k
    while i > 0 and (term * n) << 64 >= total:
        term = term * i // (n - i + 1)
        i -= 1
        total += term
    return min(1.0, (2 * total) / (1 << n))


def _wilcoxon_exact_counts(n: int) -> list[int]:
    """How many subsets of ranks 1..n sum to each total 0..n(n+1)/2 (the null distribution)."""
    counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.int64)  # at most 2**50 each for n <= 50
    counts[0] = 1
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank]
    return [int(c) for c in counts]


def wilcoxon_signed_rank(differences: Sequence[float] | FloatArray) -> SignedRank:
    """The two-sided Wilcoxon signed-rank test on paired differences.

    Matches ``scipy.stats.wilcoxon(d)`` with its defaults (``zero_method="wilcox"``,
    ``correction=False``, ``method="auto"``): zero differences are dropped, tied
    absolute differences get their average rank, and the p-value is

    - exact (the null distribution of the rank sum) for at most 50 pairs when no
      difference is zero and none are tied;
    - with zeros or ties and at most 13 pairs (zeros counted), the exact
      permutation p-value over every sign pattern (what scipy's permutation test
      enumerates);
    - otherwise the normal approximation with the tie-corrected variance and no
      continuity correction.

    When every difference is zero there is nothing to rank: p = 1.0, method
    ``undefined`` (scipy returns NaN).
    """
    d = _differences(differences)
    total = int(d.size)
    nonzero = d[d != 0]
    m = int(nonzero.size)
    if m == 0:
        return SignedRank(pvalue=1.0, method=WilcoxonMethod.UNDEFINED, nonzero=0, statistic=None)
    _, inverse, ties = np.unique(np.abs(nonzero), return_inverse=True, return_counts=True)
    ends = np.cumsum(ties)
    # Twice each average rank (an integer): a tie group ending at rank e of size t has
    # average rank e - (t - 1) / 2.
    ranks2 = (2 * ends - ties + 1)[inverse]
    r_plus2 = int(ranks2[nonzero > 0].sum())
    r_minus2 = m * (m + 1) - r_plus2
    statistic = min(r_plus2, r_minus2) / 2
    tied = int(ties.size) < m
    if total <= WILCOXON_EXACT_MAX and not tied and total == m:
        counts = _wilcoxon_exact_counts(m)
        r_plus = r_plus2 // 2
        tail = min(sum(counts[: r_plus + 1]), sum(counts[r_plus:]))
        pvalue = min(1.0, 2 * tail / (1 << m))
        method = WilcoxonMethod.EXACT
    elif total <= WILCOXON_PERMUTATION_MAX:
        patterns = np.arange(1 << m, dtype=np.int64)[:, None] >> np.arange(m, dtype=np.int64)
        null2 = (patterns & 1) @ ranks2
        tail = min(int((null2 <= r_plus2).sum()), int((null2 >= r_plus2).sum()))
        pvalue = min(1.0, 2 * tail / (1 << m))
        method = WilcoxonMethod.PERMUTATION
    else:
        tie_term = float(np.sum(ties.astype(np.float64) ** 3 - ties))
        variance = (m * (m + 1) * (2 * m + 1) - tie_term / 2) / 24
        z = (r_plus2 / 2 - m * (m + 1) / 4) / math.sqrt(variance)
        pvalue = min(1.0, math.erfc(abs(z) / math.sqrt(2)))
        method = WilcoxonMethod.APPROXIMATE
    return SignedRank(pvalue=pvalue, method=method, nonzero=m, statistic=statistic)


def paired_bootstrap_ci(
    differences: Sequence[float] | FloatArray,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    chunk_rows: int | None = None,
) -> Interval:
    """The paired-bootstrap percentile interval of the mean paired difference.

    Resample ``r`` (``r = 0 .. resamples-1`` in order) takes ``n`` pair indices with
    ``Generator(PCG64(seed)).integers(0, n, size=n)``, the generator shared by all
    resamples; the interval is the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles (numpy's linear interpolation) of the
    resampled means. The same seed gives the same interval, and the same as
    ``scipy.stats.bootstrap((d,), np.mean, method="percentile", rng=that generator)``.

    Resamples are drawn ``chunk_rows`` at a time (default: about a million indices
    per chunk): memory stays bounded and the result does not depend on it.
    """
    d = _differences(differences)
    rng = np.random.Generator(np.random.PCG64(_seed(seed)))
    count = _resamples(resamples)
    level = _confidence(confidence)
    n = int(d.size)
    rows = max(1, _CHUNK_ELEMENTS // n) if chunk_rows is None else _count(chunk_rows)
    if rows < 1:
        raise blocked(COMPARE_SETTING_INVALID)
    rows = min(rows, count)
    means = np.empty(count, dtype=np.float64)
    for start in range(0, count, rows):
        stop = min(start + rows, count)
        # One call for the chunk draws what one call per resample would, in the same order.
        indices = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = np.mean(d[indices], axis=-1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return Interval(low=float(low), high=float(high), level=level)


def holm(pvalues: Sequence[float]) -> tuple[float, ...]:
    """Holm's step-down adjusted p-values, in the order given.

    The i-th smallest p-value is multiplied by ``m - i`` (i from 0), made no
    smaller than the adjusted values before it, and capped at 1: what
    ``statsmodels.stats.multitest.multipletests(p, method="holm")[1]`` returns.
    """
    if isinstance(pvalues, str | bytes) or not isinstance(pvalues, Sequence):
        raise blocked(COMPARE_PVALUE_INVALID)
    values = [_pvalue(p) for p in pvalues]
    m = len(values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=values.__getitem__)):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return tuple(adjusted)


def _group_stats(
    score_a: FloatArray,
    passed_a: npt.NDArray[np.bool_],
    score_b: FloatArray,
    passed_b: npt.NDArray[np.bool_],
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> ComparisonStats:
    differences = score_b - score_a
    a_pass_b_fail = int(np.count_nonzero(passed_a & ~passed_b))
    a_fail_b_pass = int(np.count_nonzero(~passed_a & passed_b))
    return ComparisonStats(
        pairs=int(differences.size),
        passed_a=int(np.count_nonzero(passed_a)),
        passed_b=int(np.count_nonzero(passed_b)),
        a_pass_b_fail=a_pass_b_fail,
        a_fail_b_pass=a_fail_b_pass,
        mcnemar_p=mcnemar_exact(a_pass_b_fail, a_fail_b_pass),
        mean_score_a=float(np.mean(score_a)),
        mean_score_b=float(np.mean(score_b)),
        mean_difference=float(np.mean(differences)),
        interval=paired_bootstrap_ci(
            differences, seed=seed, resamples=resamples, confidence=confidence
        ),
        wilcoxon=wilcoxon_signed_rank(differences),
    )


def _sorted_pairs(pairs: Iterable[Pair]) -> list[Pair]:
    if isinstance(pairs, str | bytes):
        raise blocked(COMPARE_PAIR_INVALID)
    try:
        items = list(pairs)
    except TypeError:
        raise blocked(COMPARE_PAIR_INVALID) from None
    if not all(isinstance(pair, Pair) for pair in items):
        raise blocked(COMPARE_PAIR_INVALID)
    if not items:
        raise blocked(COMPARE_NO_PAIRS)
    items.sort(key=operator.attrgetter("locale", "case_key"))
    for before, after in itertools.pairwise(items):
        if before.key == after.key:
            raise blocked(COMPARE_PAIR_DUPLICATE)
    return items


def compare_pairs(
    pairs: Iterable[Pair],
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """Compare campaign B with campaign A on their paired items (differences are B - A).

    ``pairs`` are the items both campaigns completed, at most one per
    (locale, case key), in any order: they are sorted by key first, so the
    result does not depend on the order. Overall and per locale (sorted), each
    group's bootstrap starts from ``Generator(PCG64(seed))`` afresh, so a
    locale's interval does not depend on the other locales. Per-locale p-values
    are Holm-adjusted across the locales (a family of one leaves them as they
    are). Refusals: no pairs (``compare.no_pairs``), something not a
    :class:`Pair` (``compare.pair_invalid``), a key twice
    (``compare.pair_duplicate``), a bad seed, resample count or confidence
    (``compare.setting_invalid``).
    """
    seed = _seed(seed)
    resamples = _resamples(resamples)
    confidence = _confidence(confidence)
    items = _sorted_pairs(pairs)
    n = len(items)
    score_a = np.fromiter((p.score_a for p in items), dtype=np.float64, count=n)
    score_b = np.fromiter((p.score_b for p in items), dtype=np.float64, count=n)
    passed_a = np.fromiter((p.passed_a for p in items), dtype=np.bool_, count=n)
    passed_b = np.fromiter((p.passed_b for p in items), dtype=np.bool_, count=n)

    def stats_of(part: slice) -> ComparisonStats:
        return _group_stats(
            score_a[part],
            passed_a[part],
            score_b[part],
            passed_b[part],
            seed=seed,
            resamples=resamples,
            confidence=confidence,
        )

    overall = stats_of(slice(0, n))

    groups: list[tuple[str, ComparisonStats]] = []
    start = 0
    while start < n:
        locale = items[start].locale
        stop = start + 1
        while stop < n and items[stop].locale == locale:
            stop += 1
        groups.append((locale, stats_of(slice(start, stop))))
        start = stop
    mcnemar_holm = holm([stats.mcnemar_p for _, stats in groups])
    wilcoxon_holm = holm([stats.wilcoxon.pvalue for _, stats in groups])
    locales = tuple(
        LocaleComparison(locale, stats, mcnemar_p_holm=mh, wilcoxon_p_holm=wh)
        for (locale, stats), mh, wh in zip(groups, mcnemar_holm, wilcoxon_holm, strict=True)
    )
    flips = tuple(
        Flip(
            p.locale,
            p.case_key,
            FlipDirection.A_ONLY if p.passed_a else FlipDirection.B_ONLY,
        )
        for p in items
        if p.passed_a != p.passed_b
    )
    return Comparison(overall=overall, locales=locales, flips=flips, seed=seed, resamples=resamples)


__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "MAX_RESAMPLES",
    "MAX_SEED",
    "Comparison",
    "ComparisonStats",
    "Flip",
    "FlipDirection",
    "Interval",
    "LocaleComparison",
    "Pair",
    "SignedRank",
    "WilcoxonMethod",
    "compare_pairs",
    "holm",
    "mcnemar_exact",
    "paired_bootstrap_ci",
    "wilcoxon_signed_rank",
]
