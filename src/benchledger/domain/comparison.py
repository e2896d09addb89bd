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
import operator
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from benchledger.domain.campaign import LOCALE, blocked, is_identifier
from benchledger.domain.campaign_codes import (
    COMPARE_NO_PAIRS,
    COMPARE_PAIR_DUPLICATE,
    COMPARE_PAIR_INVALID,
)
from benchledger.domain.paired_tests import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    MAX_RESAMPLES,
    MAX_SEED,
    FloatArray,
    Interval,
    SignedRank,
    WilcoxonMethod,
    bootstrap_means,
    confidence_value,
    holm,
    mcnemar_exact,
    paired_bootstrap_ci,
    percentile_interval,
    real_value,
    resamples_value,
    seed_value,
    wilcoxon_signed_rank,
)


class FlipDirection(enum.StrEnum):
    """Which campaign a flipped case passes in."""

    #: Passes in A, fails in B: a regression from A to B.
    A_ONLY = "a_only"
    #: Fails in A, passes in B: an improvement from A to B.
    B_ONLY = "b_only"


# -- validation at the boundary ---------------------------------------------------


def _check_locale(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or LOCALE.fullmatch(value) is None:
        raise blocked(COMPARE_PAIR_INVALID)


def _check_key(_instance: object, _attribute: object, value: Any) -> None:
    if not is_identifier(value):
        raise blocked(COMPARE_PAIR_INVALID)


def _check_score(_instance: object, _attribute: object, value: Any) -> None:
    if real_value(value) is None:
        raise blocked(COMPARE_PAIR_INVALID)


def _check_passed(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, bool):
        raise blocked(COMPARE_PAIR_INVALID)


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


def _group_stats(
    score_a: FloatArray,
    passed_a: npt.NDArray[np.bool_],
    score_b: FloatArray,
    passed_b: npt.NDArray[np.bool_],
    interval: Interval,
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
        interval=interval,
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
    result does not depend on the order. Each locale's bootstrap starts from
    ``Generator(PCG64(seed))`` afresh, so a locale's interval does not depend on
    the other locales (and they run on threads side by side). The overall
    interval is the bootstrap *stratified by locale*: resample ``r``'s overall
    mean is the locales' resample-``r`` means weighted by their pair counts, as
    the suite fixes how many pairs each locale has; with one locale it is that
    locale's plain paired bootstrap. Per-locale p-values are Holm-adjusted
    across the locales (a family of one leaves them as they are). Refusals: no
    pairs (``compare.no_pairs``), something not a :class:`Pair`
    (``compare.pair_invalid``), a key twice (``compare.pair_duplicate``), a bad
    seed, resample count or confidence (``compare.setting_invalid``).
    """
    seed = seed_value(seed)
    resamples = resamples_value(resamples)
    confidence = confidence_value(confidence)
    items = _sorted_pairs(pairs)
    n = len(items)
    score_a = np.fromiter((p.score_a for p in items), dtype=np.float64, count=n)
    score_b = np.fromiter((p.score_b for p in items), dtype=np.float64, count=n)
    passed_a = np.fromiter((p.passed_a for p in items), dtype=np.bool_, count=n)
    passed_b = np.fromiter((p.passed_b for p in items), dtype=np.bool_, count=n)
    differences = score_b - score_a
    spans: list[tuple[str, slice]] = []
    start = 0
    while start < n:
        locale = items[start].locale
        stop = start + 1
        while stop < n and items[stop].locale == locale:
            stop += 1
        spans.append((locale, slice(start, stop)))
        start = stop

    def resampled(part: slice) -> FloatArray:
        return bootstrap_means(differences[part], seed=seed, resamples=resamples)

    # numpy draws and gathers without the GIL: the locales' bootstraps run side by side.
    workers = min(len(spans), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        means = list(pool.map(resampled, [part for _, part in spans]))
    overall_means = np.zeros(resamples, dtype=np.float64)
    for (_, part), locale_means in zip(spans, means, strict=True):
        overall_means += locale_means * ((part.stop - part.start) / n)

    def stats_of(part: slice, interval: Interval) -> ComparisonStats:
        return _group_stats(score_a[part], passed_a[part], score_b[part], passed_b[part], interval)

    groups = [
        (locale, stats_of(part, percentile_interval(locale_means, confidence)))
        for (locale, part), locale_means in zip(spans, means, strict=True)
    ]
    overall_interval = (
        groups[0][1].interval
        if len(groups) == 1
        else percentile_interval(overall_means, confidence)
    )
    overall = stats_of(slice(0, n), overall_interval)
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
