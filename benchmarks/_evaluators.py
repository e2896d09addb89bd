"""Evaluators for the pool benchmark: no work of their own, so the figure is overhead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchledger.domain.campaign_results import ClaimedCase


def instant(claim: ClaimedCase, heartbeat: Callable[[], None]) -> dict[str, Any]:
    """A valid result at once."""
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.5,
    }
