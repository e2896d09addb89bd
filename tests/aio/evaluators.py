"""Evaluators and worker processes for the concurrency tests (importable by children).

The results carry the evaluating worker's id, so a test can tell who completed
an item. ``BENCHLEDGER_TEST_EVAL_SECONDS`` sets how long a case takes.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.workpool import pool_size_for


def result_of(claim: ClaimedCase, worker: str = "") -> dict[str, Any]:
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.75,
        "worker": worker or claim.lease_owner,
    }


def _seconds() -> float:
    return float(os.environ.get("BENCHLEDGER_TEST_EVAL_SECONDS", "0.3"))


async def slow_async(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
    """A stand-in for an API call: awaits, renews the lease half way, answers."""
    await asyncio.sleep(_seconds() / 2)
    await heartbeat()
    await asyncio.sleep(_seconds() / 2)
    return result_of(claim)


def slow_blocking(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
    """The same with a blocking call (for the thread pool)."""
    time.sleep(_seconds() / 2)
    heartbeat()
    time.sleep(_seconds() / 2)
    return result_of(claim)


def run_async_worker(
    url: str,
    campaign_id: str,
    worker_id: str,
    concurrency: int,
    lease_seconds: float,
    eval_seconds: float,
    summary_path: str,
) -> None:
    """A worker process: AsyncWorker with SIGINT/SIGTERM handling; writes its summary."""

    async def evaluate(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
        with open(summary_path + ".started", "a", encoding="utf-8") as started:
            started.write(claim.work_id + "\n")
        await asyncio.sleep(eval_seconds)
        return result_of(claim, worker_id)

    async def main() -> None:
        database = AsyncDatabase(url, pool_size=pool_size_for(concurrency))
        try:
            worker = AsyncWorker(
                AsyncCampaignService(database),
                campaign_id,
                worker_id,
                evaluate,
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                retry_base_seconds=0,
                handle_signals=True,
            )
            summary = await worker.run()
        finally:
            await database.dispose()
        with open(summary_path, "w", encoding="utf-8") as out:
            json.dump(
                {
                    "cases": summary.cases,
                    "succeeded": summary.succeeded,
                    "stopped": summary.stopped,
                    "signals": worker.signals,
                },
                out,
            )

    asyncio.run(main())
