"""The default report builder: per-locale counts, mean score and pass rate."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import chain, groupby
from typing import Any

from benchledger.domain.campaign import results_sha256
from benchledger.domain.campaign_audit import VerifiedResults
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.canonical import canonical_json, sha256_json

REPORT_SCHEMA = "benchledger.benchmark-campaign-report.v1"


class ReportMismatch(ValueError):
    """A stored report is not the report its results produce."""


def _summary(results: Sequence[Mapping[str, Any]], pass_score: float) -> dict[str, Any]:
    scores = [float(result["score"]) for result in results]
    passed = [
        result["passed"] if isinstance(result.get("passed"), bool) else score >= pass_score
        for result, score in zip(results, scores, strict=True)
    ]
    return _counted(scores, passed)


def _counted(scores: Sequence[float], passed: Sequence[bool]) -> dict[str, Any]:
    count = len(scores)
    return {
        "items": count,
        "mean_score": round(math.fsum(scores) / count, 6) if count else None,
        "pass_rate": round(sum(passed) / count, 6) if count else None,
        "passed": sum(passed),
    }


class DefaultReportBuilder:
    """Summarizes results per target locale and overall; deterministic, so verifiable.

    A result passes when its ``passed`` is true, or, without ``passed``, when its
    ``score`` is at least ``pass_score``. The report binds the policy, the suite
    and the ordered result digests.
    """

    def __init__(self, pass_score: float = 0.5) -> None:
        if not (isinstance(pass_score, int | float) and 0 <= pass_score <= 1):
            raise ValueError("pass_score must be in [0, 1]")
        self.pass_score = float(pass_score)

    def build(
        self, policy: CampaignPolicy, suite: Suite, results: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        if isinstance(results, VerifiedResults) and results.results_sha256 is not None:
            return self._from_columns(policy, suite, results, results.results_sha256)
        by_locale: dict[str, list[Mapping[str, Any]]] = {}
        for result in results:
            by_locale.setdefault(str(result["target_locale"]), []).append(result)
        return {
            "schema": REPORT_SCHEMA,
            "campaign_id": policy.campaign_id,
            "policy_sha256": policy.sha256,
            "suite_sha256": suite.sha256,
            "results_sha256": results_sha256([sha256_json(result) for result in results]),
            "candidate": policy.candidate(),
            "case_count": len(suite.cases),
            "pass_score": self.pass_score,
            "locales": {
                locale: _summary(by_locale.get(locale, []), self.pass_score)
                for locale in policy.required_locales
            },
            "overall": _summary(results, self.pass_score),
        }

    def _from_columns(
        self, policy: CampaignPolicy, suite: Suite, results: VerifiedResults, digest: str
    ) -> dict[str, Any]:
        """The same report from the audit's columns (each result's locale, score and
        ``passed``) and its results digest, without a mapping per result."""
        pass_score = self.pass_score
        scores = list(map(float, results.scores))
        passed = [
            flag if flag is True or flag is False else score >= pass_score
            for flag, score in zip(results.passed, scores, strict=True)
        ]
        spans: dict[str, list[tuple[int, int]]] = {}
        start = 0
        for locale, run in groupby(results.locales):
            end = start + len(list(run))
            spans.setdefault(str(locale), []).append((start, end))
            start = end
        if start != len(scores):
            raise ValueError("a column per result")

        def summary(locale: str) -> dict[str, Any]:
            ranges = spans.get(locale, [])
            return _counted(
                list(chain.from_iterable(scores[a:b] for a, b in ranges)),
                list(chain.from_iterable(passed[a:b] for a, b in ranges)),
            )

        return {
            "schema": REPORT_SCHEMA,
            "campaign_id": policy.campaign_id,
            "policy_sha256": policy.sha256,
            "suite_sha256": suite.sha256,
            "results_sha256": digest,
            "candidate": policy.candidate(),
            "case_count": len(suite.cases),
            "pass_score": self.pass_score,
            "locales": {locale: summary(locale) for locale in policy.required_locales},
            "overall": _counted(scores, passed),
        }

    def verify(
        self,
        report: Mapping[str, Any],
        policy: CampaignPolicy,
        suite: Suite,
        results: Sequence[Mapping[str, Any]],
    ) -> None:
        # A stored report keeps the pass score it was built with: it is checked under
        # that one, whatever this builder's (a bad one is a ValueError: report_invalid).
        declared = report.get("pass_score", self.pass_score)
        builder = self if declared == self.pass_score else DefaultReportBuilder(declared)
        if canonical_json(dict(report)) != canonical_json(builder.build(policy, suite, results)):
            raise ReportMismatch("the report is not the one its results produce")
