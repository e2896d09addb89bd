"""Archiving a finished campaign: what it keeps once its item rows are dropped (pure).

``CampaignService.archive`` drops a finished campaign's items, attempt history
and claim log, and keeps, beside the report (and its state, policy and suite),
a few facts on the campaign row:

- when it was archived and how many items went;
- the digest of the ordered result digests the audit verified (what the report
  is bound to: its ``results_sha256``);
- a per-locale summary of the dropped results (:class:`SummaryTally`: items,
  succeeded, passed, pass rate and mean score, as
  ``load_report(provisional=True)`` counts them), at the report's pass score;
- a seal (:func:`archive_seal`): the sha256 binding these to the kept report's
  sha256.

Once the results are gone the report cannot be rebuilt from them: the audit of
an archived campaign checks the report against its own sha256 and these facts
(:func:`archive_problem`). Like a result's seal, the archive's seal proves the
rows agree with one another, not who wrote them. Nothing here touches a database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from benchledger.domain.canonical import (
    CanonicalJsonError,
    canonical_json,
    is_sha256,
    parse_canonical_json,
    sha256_json,
    sha256_text,
)
from benchledger.domain.integrity import is_time

#: The ``schema`` of an archive's per-locale summary.
SUMMARY_SCHEMA: Final = "benchledger.campaign-archive-summary.v1"
#: What :func:`archive_seal` hashes, besides the facts (a version of the seal's form).
SEAL_SCHEMA: Final = "benchledger.campaign-archive-seal.v1"
#: The keys of one locale's (and the overall) summary.
SUMMARY_KEYS: Final = ("items", "succeeded", "passed", "pass_rate", "mean_score")


def _summary(items: int, succeeded: int, passed: int, score: float) -> dict[str, Any]:
    return {
        "items": items,
        "succeeded": succeeded,
        "passed": passed,
        "pass_rate": round(passed / succeeded, 6) if succeeded else None,
        "mean_score": round(score / succeeded, 6) if succeeded else None,
    }


class SummaryTally:
    """Items per locale, counted one at a time: what succeeded, passed, and its scores.

    The pass rate and mean score are over the succeeded items; a succeeded item
    whose result has no score (or no verdict) counts as succeeded, not passed,
    and adds nothing to the scores (``load_report(provisional=True)``'s rule).
    """

    def __init__(self) -> None:
        self.items: Counter[str] = Counter()
        self.succeeded: Counter[str] = Counter()
        self.passed: Counter[str] = Counter()
        self.scores: dict[str, float] = {}

    def add(self, locale: str, succeeded: bool, scored: tuple[float, bool] | None) -> None:
        """One item of ``locale``; ``scored`` is its result's (score, passed), if any."""
        self.items[locale] += 1
        if not succeeded:
            return
        self.succeeded[locale] += 1
        if scored is not None:
            self.scores[locale] = self.scores.get(locale, 0.0) + scored[0]
            self.passed[locale] += int(scored[1])

    @property
    def count(self) -> int:
        return sum(self.items.values())

    def locales(self) -> dict[str, dict[str, Any]]:
        """Each locale's summary, in locale order."""
        return {
            locale: _summary(
                self.items[locale],
                self.succeeded[locale],
                self.passed[locale],
                self.scores.get(locale, 0.0),
            )
            for locale in sorted(self.items)
        }

    def overall(self) -> dict[str, Any]:
        return _summary(
            sum(self.items.values()),
            sum(self.succeeded.values()),
            sum(self.passed.values()),
            sum(self.scores.values()),
        )

    def payload(self, pass_score: float) -> dict[str, Any]:
        """The archive's summary document (stored as canonical JSON)."""
        return {
            "schema": SUMMARY_SCHEMA,
            "pass_score": pass_score,
            "locales": self.locales(),
            "overall": self.overall(),
        }


def archive_seal(
    campaign_id: str,
    archived_at: float,
    items: int,
    results_sha256: str,
    summary_json: str,
    report_sha256: str,
) -> str:
    """The sha256 binding an archive's facts to the kept report's sha256."""
    return sha256_json(
        {
            "schema": SEAL_SCHEMA,
            "campaign_id": campaign_id,
            "archived_at": archived_at,
            "items": items,
            "results_sha256": results_sha256,
            "summary_sha256": sha256_text(summary_json),
            "report_sha256": report_sha256,
        }
    )


#: The campaign row's archive columns (all NULL when it was never archived).
ARCHIVE_COLUMNS: Final = (
    "archived_at",
    "archived_items",
    "archived_results_sha256",
    "archived_summary_json",
    "archived_seal",
)


def is_archived(row: Any) -> bool:
    """Whether a campaign row says it was archived (its ``archived_at`` is set)."""
    return getattr(row, "archived_at", None) is not None


def half_archived(row: Any) -> bool:
    """A row not archived that still carries some archive fact: an edit."""
    return not is_archived(row) and any(
        getattr(row, name, None) is not None for name in ARCHIVE_COLUMNS
    )


def _summary_ok(summary: Any, items: int, locales: Iterable[str], case_count: int) -> bool:
    if not (isinstance(summary, dict) and summary.get("schema") == SUMMARY_SCHEMA):
        return False
    score = summary.get("pass_score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        return False
    per_locale = summary.get("locales")
    if not isinstance(per_locale, dict) or set(per_locale) != set(locales):
        return False
    for entry in (*per_locale.values(), summary.get("overall")):
        if not (isinstance(entry, dict) and tuple(sorted(entry)) == tuple(sorted(SUMMARY_KEYS))):
            return False
        # Everything succeeded: an archived campaign's report was final.
        if entry["items"] != entry["succeeded"] or not 0 <= entry["passed"] <= entry["items"]:
            return False
    overall = summary["overall"]
    return bool(
        all(entry["items"] == case_count for entry in per_locale.values())
        and overall["items"] == items
        and overall["passed"] == sum(entry["passed"] for entry in per_locale.values())
    )


def archive_problem(
    row: Any,
    *,
    campaign_id: str,
    work_count: int,
    locales: Iterable[str],
    case_count: int,
    report_row: Any,
    limit: float,
) -> str | None:
    """What is wrong with an archived campaign row's facts, or ``None``.

    ``row`` has the archive columns; ``report_row`` is the kept report's row
    (``None``: none); ``limit`` is the latest acceptable time (now plus the
    tolerated clock skew). Checked: the time, the item count (the work count),
    the digest's form and its agreement with the report's ``results_sha256``,
    the summary (canonical, one entry per required locale of ``case_count``
    items, every item succeeded) and the seal over all of them and the report's
    sha256.
    """
    archived_at = row.archived_at
    if not is_time(archived_at) or archived_at > limit:
        return "archived_at is not a time before now"
    if row.archived_items != work_count:
        return "archived_items is not the campaign's work count"
    digest = row.archived_results_sha256
    if not is_sha256(digest):
        return "archived_results_sha256 is not a sha256"
    if report_row is None or report_row.results_sha256 != digest:
        return "the kept report is not bound to the archived results"
    text = row.archived_summary_json
    try:
        summary = parse_canonical_json(text) if isinstance(text, str) else None
    except CanonicalJsonError:
        summary = None
    try:
        summary_ok = _summary_ok(summary, work_count, locales, case_count)
    except (TypeError, KeyError):  # a count that is not a number
        summary_ok = False
    if not summary_ok:
        return "archived_summary_json is not the summary of the archived items"
    seal = archive_seal(
        campaign_id, float(archived_at), work_count, digest, text, report_row.report_sha256
    )
    if row.archived_seal != seal:
        return "archived_seal does not bind these facts to the kept report"
    return None


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _sorted_counts(rows: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(sorted(rows.items())))


@attrs.frozen
class ArchiveOutcome:
    """What ``archive`` kept and dropped.

    ``summary`` is the per-locale summary it stored; ``dropped`` the rows it
    deleted per table; ``exported`` how many items the ``export`` it was given
    took (``None``: no export).
    """

    campaign_id: str
    archived_at: float
    items: int
    results_sha256: str
    report_sha256: str
    summary: Mapping[str, Any] = attrs.field(converter=_read_only, hash=False)
    dropped: Mapping[str, int] = attrs.field(converter=_sorted_counts, hash=False)
    exported: int | None = None

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "archived_at": self.archived_at,
            "items": self.items,
            "results_sha256": self.results_sha256,
            "report_sha256": self.report_sha256,
            "summary": parse_canonical_json(canonical_json(dict(self.summary))),
            "dropped_rows": dict(self.dropped),
            "exported": self.exported,
        }
