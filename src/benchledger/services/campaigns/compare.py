"""Comparing two campaigns over one suite, and the provisional report of an unfinished one.

``compare`` streams both campaigns' items in (locale, case key) code-point order
in one read transaction and pairs them in a merge (memory holds the pairs'
scores, never the results' texts); the statistics are the domain's
(:func:`~benchledger.domain.comparison.compare_pairs`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus, blocked
from benchledger.domain.campaign_archive import SummaryTally
from benchledger.domain.campaign_comparison import (
    CampaignComparison,
    CampaignSide,
    DropReason,
)
from benchledger.domain.campaign_labels import candidate_of
from benchledger.domain.comparison import DEFAULT_RESAMPLES, Pair, compare_pairs
from benchledger.domain.paired_tests import resamples_value, seed_value
from benchledger.domain.results import result_passed, result_score
from benchledger.repositories.campaigns.results import ResultReads
from benchledger.services.campaigns.archive import archived_summary
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.results import pass_score_of

#: (locale, case key, status, result text), as ``ResultReads.stream`` yields them.
Item = tuple[str, str, str, str | None]


def _rows(batches: Iterator[Sequence[Any]]) -> Iterator[Item]:
    for batch in batches:
        yield from batch


def _row(reads: ResultReads, campaign_id: Any) -> Any:
    if not dom.is_campaign_id(campaign_id):
        raise blocked(dom.NOT_FOUND)
    row = reads.campaign_row(str(campaign_id))
    if row is None:
        raise blocked(dom.NOT_FOUND)
    return row


def _side(reads: ResultReads, campaign_id: Any) -> tuple[CampaignSide, str]:
    row = _row(reads, campaign_id)
    if row.archived_at is not None:
        raise blocked(dom.ARCHIVED)  # its items were dropped: nothing to pair
    return CampaignSide(str(campaign_id), row.name, candidate_of(row)), str(row.suite_sha256)


def _scored(text: str | None, pass_score: float) -> tuple[float, bool] | None:
    result = json.loads(text) if text is not None else None
    if not isinstance(result, dict):
        return None
    score, passed = result_score(result), result_passed(result, pass_score)
    return None if score is None or passed is None else (score, passed)


def pair_items(
    a: Iterator[Item], b: Iterator[Item], pass_score: float
) -> tuple[list[Pair], Counter[str]]:
    """Merge two item streams in key order: the pairs, and the other items by reason."""
    pairs: list[Pair] = []
    dropped: Counter[str] = Counter()
    left, right = next(a, None), next(b, None)
    while left is not None or right is not None:
        if right is None or (left is not None and left[:2] < right[:2]):
            dropped[DropReason.ONLY_IN_A] += 1
            left = next(a, None)
            continue
        if left is None or right[:2] < left[:2]:
            dropped[DropReason.ONLY_IN_B] += 1
            right = next(b, None)
            continue
        a_done, b_done = left[2] == WorkStatus.SUCCEEDED, right[2] == WorkStatus.SUCCEEDED
        if not (a_done or b_done):
            dropped[DropReason.NEITHER_SUCCEEDED] += 1
        elif not a_done:
            dropped[DropReason.A_NOT_SUCCEEDED] += 1
        elif not b_done:
            dropped[DropReason.B_NOT_SUCCEEDED] += 1
        else:
            scored_a, scored_b = _scored(left[3], pass_score), _scored(right[3], pass_score)
            if scored_a is None or scored_b is None:
                dropped[DropReason.NO_SCORE] += 1
            else:
                pairs.append(Pair(left[0], left[1], *scored_a, *scored_b))
        left, right = next(a, None), next(b, None)
    return pairs, dropped


def compare(
    context: CampaignContext,
    campaign_a: Any,
    campaign_b: Any,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
) -> CampaignComparison:
    """``CampaignService.compare``: B against A on the items both completed."""
    seed, resamples = seed_value(seed), resamples_value(resamples)  # before any read
    pass_score = pass_score_of(context)
    with context.db.read() as session:
        reads = ResultReads(session.connection())
        side_a, suite_a = _side(reads, campaign_a)
        side_b, suite_b = _side(reads, campaign_b)
        if suite_a != suite_b:
            raise blocked(dom.SUITE_DIFFERS)
        pairs, dropped = pair_items(
            _rows(reads.stream(side_a.campaign_id)),
            _rows(reads.stream(side_b.campaign_id)),
            pass_score,
        )
    comparison = compare_pairs(pairs, seed=seed, resamples=resamples) if pairs else None
    return CampaignComparison(
        a=side_a,
        b=side_b,
        suite_sha256=suite_a,
        paired=len(pairs),
        dropped=dropped,
        comparison=comparison,
    )


def provisional_report(context: CampaignContext, campaign_id: Any) -> dict[str, Any]:
    """``load_report(provisional=True)``: what has succeeded so far, per locale and overall.

    Marked ``"provisional": true``; never stored, never the immutable report. Of an
    archived campaign (its items dropped): the summary the archive kept, counted the
    same way from every result at the report's pass score, marked ``"provisional":
    false`` with its ``archived_at``.
    """
    pass_score = pass_score_of(context)
    tally = SummaryTally()
    with context.db.read() as session:
        reads = ResultReads(session.connection())
        row = _row(reads, campaign_id)
        side = CampaignSide(str(campaign_id), row.name, candidate_of(row))
        suite = str(row.suite_sha256)
        kept = archived_summary(row)
        if kept is None:
            for locale, _key, status, text in _rows(reads.stream(side.campaign_id)):
                succeeded = status == WorkStatus.SUCCEEDED
                tally.add(locale, succeeded, _scored(text, pass_score) if succeeded else None)
    head = {
        "campaign_id": side.campaign_id,
        "name": side.name,
        "candidate": side.candidate.as_payload(),
        "suite_sha256": suite,
    }
    if kept is not None:
        return {
            "provisional": False,
            "archived_at": float(row.archived_at),
            **head,
            "pass_score": kept.get("pass_score"),
            "locales": kept.get("locales"),
            "overall": kept.get("overall"),
        }
    return {
        "provisional": True,
        **head,
        "pass_score": pass_score,
        "locales": tally.locales(),
        "overall": tally.overall(),
    }
