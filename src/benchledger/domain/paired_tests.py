"""The paired tests behind a comparison, as pure functions of numbers (no campaigns).

- :func:`mcnemar_exact`: McNemar's exact test on the discordant pairs
  (``scipy.stats.binomtest(k, n, 0.5)``);
- :func:`wilcoxon_signed_rank`: the two-sided signed-rank test on paired
  differences, in the regime ``scipy.stats.wilcoxon`` picks by default;
- :func:`paired_bootstrap_ci`: the percentile interval of the mean paired
  difference (``scipy.stats.bootstrap(..., method="percentile")`` given the same
  generator);
- :func:`holm`: Holm's step-down adjustment (``statsmodels``' ``multipletests``).

:mod:`benchledger.domain.comparison` applies them to two campaigns' pairs;
tests/campaign/test_comparison_stats.py holds each to scipy's numbers.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_codes import (
    COMPARE_NO_PAIRS,
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


# -- settings, checked at the boundary ----------------------------------------------


def real_value(value: object) -> float | None:
    """A finite number (not a bool) as a float; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def _count(value: object, code: str = COMPARE_SETTING_INVALID) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise blocked(code)
    return value


def seed_value(value: object) -> int:
    seed = _count(value)
    if seed > MAX_SEED:
        raise blocked(COMPARE_SETTING_INVALID)
    return seed


def resamples_value(value: object) -> int:
    resamples = _count(value)
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise blocked(COMPARE_SETTING_INVALID)
    return resamples


def confidence_value(value: object) -> float:
    level = real_value(value)
    if level is None or not 0 < level < 1:
        raise blocked(COMPARE_SETTING_INVALID)
    return level


def _pvalue(value: object) -> float:
    p = real_value(value)
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
    means = bootstrap_means(differences, seed=seed, resamples=resamples, chunk_rows=chunk_rows)
    return percentile_interval(means, confidence)


def bootstrap_means(
    differences: Sequence[float] | FloatArray,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    chunk_rows: int | None = None,
) -> FloatArray:
    """The resampled means of :func:`paired_bootstrap_ci`, in resample order."""
    d = _differences(differences)
    rng = np.random.Generator(np.random.PCG64(seed_value(seed)))
    count = resamples_value(resamples)
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
    return means


def percentile_interval(means: FloatArray, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The percentile interval of resampled means (numpy's linear interpolation)."""
    level = confidence_value(confidence)
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
