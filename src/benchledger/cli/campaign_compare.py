"""``benchledger campaign compare A B``: two campaigns over one suite, paired per case.

Prints, per locale and overall, how many pairs, pass rates A and B and their
difference (B - A), McNemar's exact p on the discordant pairs, mean scores, the
mean paired difference with its bootstrap interval, the Wilcoxon p-value, and
(per locale) both p-values after Holm's correction; what was dropped and why;
``--flips`` lists the cases that pass in one campaign and fail in the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from benchledger.cli.campaign import actions, campaign_service, pass_score_option
from benchledger.cli.output import console, emit_json, json_option
from benchledger.cli.settings import Settings, pass_settings

if TYPE_CHECKING:
    from rich.console import Console

    from benchledger.domain.campaign_comparison import CampaignComparison, CampaignSide
    from benchledger.domain.comparison import ComparisonStats


def _p(value: float) -> str:
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _side(label: str, side: CampaignSide) -> str:
    name = f"{side.name} · " if side.name else ""
    return f"{label}: {name}{side.candidate.label} ({side.campaign_id})"


def _row(name: str, stats: ComparisonStats, holm: tuple[float, float] | None) -> list[str]:
    interval = stats.interval
    return [
        name,
        str(stats.pairs),
        _pct(stats.pass_rate_a),
        _pct(stats.pass_rate_b),
        f"{100 * stats.pass_rate_difference:+.1f}",
        f"{stats.a_pass_b_fail}/{stats.a_fail_b_pass}",
        _p(stats.mcnemar_p) + ("" if holm is None else f" ({_p(holm[0])})"),
        f"{stats.mean_score_a:.3f}",
        f"{stats.mean_score_b:.3f}",
        f"{stats.mean_difference:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]",
        _p(stats.wilcoxon.pvalue) + ("" if holm is None else f" ({_p(holm[1])})"),
    ]


def print_comparison(result: CampaignComparison, out: Console, *, flips: bool) -> None:
    """The comparison as tables: per locale and overall, what was dropped, the flips."""
    from rich.table import Table

    out.print(_side("A", result.a), markup=False)
    out.print(_side("B", result.b), markup=False)
    out.print(f"suite {result.suite_sha256}; differences are B - A", markup=False)
    dropped = {reason: count for reason, count in result.dropped.items() if count}
    out.print(
        f"pairs: {result.paired}; dropped: "
        + (", ".join(f"{reason} {count}" for reason, count in dropped.items()) or "none"),
        markup=False,
    )
    comparison = result.comparison
    if comparison is None:
        out.print("no item succeeded in both campaigns: nothing to compare yet", markup=False)
        return
    table = Table(show_edge=False, title_justify="left")
    headers = (
        "locale",
        "pairs",
        "pass A",
        "pass B",
        "diff pp",
        "A only/B only",
        "McNemar p (Holm)",
        "mean A",
        "mean B",
        f"mean diff [{round(100 * comparison.overall.interval.level)}% CI]",
        "Wilcoxon p (Holm)",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "locale" else "right")
    for entry in comparison.locales:
        table.add_row(
            *_row(entry.locale, entry.stats, (entry.mcnemar_p_holm, entry.wilcoxon_p_holm))
        )
    table.add_section()
    table.add_row(*_row("overall", comparison.overall, None), style="bold")
    out.print(table)
    out.print(
        f"bootstrap: {comparison.resamples:,} resamples, seed {comparison.seed}; "
        "docs/analysis.md says what each number means and when not to trust it",
        markup=False,
    )
    if comparison.overall.pairs < 30:
        out.print("few pairs (< 30): intervals and p-values are rough", markup=False)
    if flips:
        shown = Table(show_edge=False, title="flips: pass in one, fail in the other")
        for header in ("locale", "case", "passes in"):
            shown.add_column(header)
        for flip in comparison.flips:
            shown.add_row(flip.locale, flip.case_key, "A" if flip.direction == "a_only" else "B")
        out.print(shown if comparison.flips else "no flips")


@click.command("compare", short_help="Compare two campaigns of one suite, case by case.")
@click.argument("campaign_a")
@click.argument("campaign_b")
@click.option(
    "--flips", is_flag=True, help="List the cases that pass in one and fail in the other."
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    default=0,
    show_default=True,
    help="The bootstrap's seed (the same seed gives the same interval).",
)
@click.option(
    "--resamples",
    type=click.IntRange(1, 1_000_000),
    default=10_000,
    show_default=True,
    help="Bootstrap resamples.",
)
@pass_score_option(
    "A result without a passed flag passes from this score (0-1), in both campaigns [default: 0.5]."
)
@json_option
@pass_settings
def campaign_compare(
    settings: Settings,
    campaign_a: str,
    campaign_b: str,
    flips: bool,
    seed: int,
    resamples: int,
    pass_score: float | None,
    as_json: bool,
) -> None:
    """Compare campaign B with campaign A: both must be over the same suite.

    Items pair by (locale, case key) when both succeeded with a score; the
    rest are counted by reason. Differences are B - A. Pass rates, McNemar and
    the flips count a result as passed by its own passed flag, else when its
    score reaches --pass-score (0.5 by default). With --json, the whole
    comparison (every number, the flips) as one document.
    """
    with campaign_service(settings, pass_score=pass_score) as campaigns:
        a = actions(campaigns).resolve(campaign_a)
        b = actions(campaigns).resolve(campaign_b)
        result = campaigns.compare(a, b, seed=seed, resamples=resamples)
    if as_json:
        from benchledger.domain.results import DEFAULT_PASS_SCORE

        used = DEFAULT_PASS_SCORE if pass_score is None else pass_score
        emit_json({**result.as_payload(), "pass_score": used})
    else:
        print_comparison(result, console(), flips=flips)
