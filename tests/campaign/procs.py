"""Worker processes for the multi-process tests (importable by spawned children)."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService


def _result(claim: Any, worker_id: str) -> dict[str, Any]:
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.5,
        "worker": worker_id,
    }


def run_worker(url: str, campaign_id: str, worker_id: str, log_path: str, seed: int) -> None:
    """Claim until the campaign is complete; fail ~10% of first attempts (retryable).

    Logs one JSON line per lease: work id, attempt, token, how it ended, and the
    monotonic (system-wide) instants right after the claim and right before the release.
    """
    rng = random.Random(seed)
    db = Database(url)
    service = CampaignService(db)
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            while True:
                claim = service.claim(campaign_id, worker_id, lease_seconds=600)
                if claim is None:
                    counts = service.status(campaign_id).counts
                    if counts["pending"] + counts["retry_wait"] + counts["leased"] == 0:
                        return
                    time.sleep(0.005)
                    continue
                held_from = time.monotonic_ns()
                if claim.attempt == 1 and rng.random() < 0.1:
                    held_to = time.monotonic_ns()
                    service.fail(claim, "test.flaky", retryable=True, delay_seconds=0)
                    ended = "failed"
                else:
                    held_to = time.monotonic_ns()
                    service.complete(claim, _result(claim, worker_id))
                    ended = "completed"
                log.write(
                    json.dumps(
                        {
                            "work_id": claim.work_id,
                            "attempt": claim.attempt,
                            "token": claim.lease_token,
                            "worker": worker_id,
                            "ended": ended,
                            "from": held_from,
                            "to": held_to,
                        }
                    )
                    + "\n"
                )
    finally:
        db.dispose()


def claim_and_hang(url: str, campaign_id: str, lease_seconds: float, conn: Any) -> None:
    """Claim one item, report it through ``conn``, then hang until killed."""
    db = Database(url)
    service = CampaignService(db)
    claim = service.claim(campaign_id, "doomed-worker", lease_seconds=lease_seconds)
    assert claim is not None
    conn.send((claim.work_id, claim.lease_token, claim.lease_expires_at, os.getpid()))
    while True:
        time.sleep(60)
