"""The deterministic example evaluator used by ``benchledger demo`` and the tests.

``benchledger campaign work ID --evaluator benchledger.examples.evaluator:evaluate``

It stands in for a real benchmark (a candidate model translating each case,
then scored): every answer is a pure function of (case key, target locale,
candidate, attempt), so two runs of the demo agree exactly. It fails:

- *retryably* (:class:`~benchledger.errors.DependencyFailed` with
  ``retryable=True``): about 8% of items fail their first attempt with
  ``example.timeout``, and about 2% fail their first two attempts with
  ``example.rate_limited``, so with ``max_attempts >= 3`` every one of them
  succeeds in the end (and with ``max_attempts=2`` the 2% fail for good);
- *for good* (``retryable=False``): a candidate whose model id ends in
  ``-lite`` does not support ``ja-JP`` (``example.locale_unsupported``) and
  refuses sources over 90 characters (``example.source_too_long``).

Results are content-free (hashes and numbers only, no text), in the shape the
default result verifier and report builder expect: ``target_locale``,
``suite.case_key``, ``suite.suite_sha256``, ``score`` in [0, 1], ``passed``.

``BENCHLEDGER_EXAMPLE_WORK_MS`` (default 0) makes every case take that many
milliseconds, renewing the lease half way, to imitate real work.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from typing import Any

from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import DependencyFailed

RESULT_SCHEMA = "benchledger.example-result.v1"
WORK_MS_ENV = "BENCHLEDGER_EXAMPLE_WORK_MS"
PASS_SCORE = 0.6

#: Locale difficulty: a small, fixed bias so the per-locale report differs.
_LOCALE_BIAS = {"de-DE": 0.04, "fr-FR": 0.05, "ja-JP": -0.06, "pt-BR": 0.0}

TIMEOUT = "example.timeout"
RATE_LIMITED = "example.rate_limited"
LOCALE_UNSUPPORTED = "example.locale_unsupported"
SOURCE_TOO_LONG = "example.source_too_long"
#: Every dependency code this evaluator raises, and whether it is retryable.
CODES = {TIMEOUT: True, RATE_LIMITED: True, LOCALE_UNSUPPORTED: False, SOURCE_TOO_LONG: False}


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def _fraction(hex_digits: str) -> float:
    return int(hex_digits, 16) / float(16 ** len(hex_digits) - 1)


def transient_failures(case_key: str, target_locale: str) -> int:
    """How many first attempts of this item fail retryably: 0, 1 or 2."""
    roll = int(_digest(case_key, target_locale)[:8], 16) % 1000
    if roll < 20:
        return 2
    if roll < 100:
        return 1
    return 0


def permanent_failure(job: dict[str, Any]) -> str | None:
    """The code this item fails with for good under its candidate, if any."""
    if not str(job["candidate"]["model_id"]).endswith("-lite"):
        return None
    if job["target_locale"] == "ja-JP":
        return LOCALE_UNSUPPORTED
    if len(job["source"]["text"]) > 90:
        return SOURCE_TOO_LONG
    return None


def score(case_key: str, target_locale: str, candidate: dict[str, Any]) -> float:
    digest = _digest(case_key, target_locale, candidate["model_id"], candidate["model_version"])
    value = 0.45 + 0.5 * _fraction(digest[:12]) + _LOCALE_BIAS.get(target_locale, 0.0)
    return round(min(1.0, max(0.0, value)), 4)


def result_for(job: dict[str, Any]) -> dict[str, Any]:
    """The result of one job (what :func:`evaluate` returns once it succeeds)."""
    locale = str(job["target_locale"])
    case_key = str(job["suite_case_key"])
    source = job["source"]
    candidate = job["candidate"]
    value = score(case_key, locale, candidate)
    output_sha256 = _digest("output", case_key, locale, candidate["model_version"])
    length_ratio = round(0.9 + 0.4 * _fraction(output_sha256[:6]), 3)
    return {
        "schema": RESULT_SCHEMA,
        "target_locale": locale,
        "suite": {"case_key": case_key, "suite_sha256": job["suite_sha256"]},
        "source_sha256": hashlib.sha256(str(source["text"]).encode("utf-8")).hexdigest(),
        "output_sha256": output_sha256,
        "candidate": {
            "model_id": candidate["model_id"],
            "model_version": candidate["model_version"],
        },
        "score": value,
        "passed": value >= PASS_SCORE,
        "metrics": {"length_ratio": length_ratio},
    }


def _work_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(WORK_MS_ENV, "0"))) / 1000.0
    except ValueError:
        return 0.0


def evaluate(claim: ClaimedCase, heartbeat: Callable[[], None]) -> dict[str, Any]:
    """Evaluate one claimed case (the :class:`~benchledger.ports.campaign.Evaluate` protocol)."""
    job = claim.job_payload
    seconds = _work_seconds()
    if seconds:
        time.sleep(seconds / 2)
        heartbeat()
        time.sleep(seconds / 2)
    permanent = permanent_failure(job)
    if permanent is not None:
        raise DependencyFailed(permanent, retryable=False)
    failures = transient_failures(claim.suite_case_key, claim.target_locale)
    if claim.attempt <= failures:
        code = RATE_LIMITED if failures == 2 else TIMEOUT
        raise DependencyFailed(code, retryable=True)
    return result_for(job)
