"""The chaos tests' worker processes (importable by spawned children).

Each runs the library's own :class:`~benchledger.Worker` with
``until_finished=True``, logs one JSON line per case outcome and one final
line with how the run ended, and exits 0 only when ``run`` returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.db import Database
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.faults import OutagePolicy
from benchledger.services.campaigns import CampaignService
from benchledger.workers.loop import Worker, WorkerProgress

#: Workers retry quickly here: a restart takes a few seconds, not minutes.
OUTAGE = OutagePolicy(budget_seconds=90, base_delay=0.05, max_delay=0.5)


class SlowReportBuilder(DefaultReportBuilder):
    """Takes ``seconds`` to build: long enough to kill the process that holds the report."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def build(
        self, policy: CampaignPolicy, suite: Suite, results: Mapping[str, Any]
    ) -> dict[str, Any]:
        time.sleep(self.seconds)
        return super().build(policy, suite, results)  # type: ignore[arg-type]


def result_for(claim: ClaimedCase, worker_id: str) -> dict[str, Any]:
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.75,
        "worker": worker_id,
    }


def run_worker(
    url: str,
    campaign_id: str,
    worker_id: str,
    log_path: str,
    evaluate_seconds: float,
    lease_seconds: float,
    report_seconds: float,
) -> None:
    log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def write(record: dict[str, Any]) -> None:
        log.write(json.dumps(record) + "\n")
        log.flush()

    def evaluate(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
        time.sleep(evaluate_seconds)
        return result_for(claim, worker_id)

    def progress(event: WorkerProgress) -> None:
        outcome = event.outcome
        if outcome is None:
            write({"event": event.event, "lost": True})
            return
        write(
            {
                "event": event.event,
                "work_id": getattr(outcome, "work_id", None),
                "status": outcome.status,
                "attempt": outcome.attempt,
            }
        )

    write({"event": "start", "pid": os.getpid(), "worker": worker_id})
    database = Database(url)
    try:
        builder = SlowReportBuilder(report_seconds) if report_seconds else None
        # A worker that starts while the server restarts waits for it (its whole outage
        # budget, as `campaign work` does; the constructor's default is a few seconds).
        service = CampaignService(database, report_builder=builder, outage=OUTAGE)
        summary = Worker(
            service,
            campaign_id,
            worker_id,
            evaluate,
            lease_seconds=lease_seconds,
            retry_base_seconds=0,
            until_finished=True,
            poll_seconds=0.2,
            progress=progress,
            outage=OUTAGE,
        ).run()
    except BaseException as error:
        write({"event": "died", "error": f"{type(error).__name__}: {error}"[:500]})
        log.close()
        sys.exit(3)
    write(
        {
            "event": "finished",
            "cases": summary.cases,
            "lost": summary.lost,
            "lost_reports": summary.lost_reports,
            "report": summary.report.status if summary.report else None,
        }
    )
    log.close()
    database.dispose()


def run_async_worker(
    url: str, campaign_id: str, worker_id: str, log_path: str, lease_seconds: float
) -> None:
    """An :class:`~benchledger.aio.AsyncWorker` (8 cases in flight), logged as ``run_worker``."""
    from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker

    log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def write(record: dict[str, Any]) -> None:
        log.write(json.dumps(record) + "\n")
        log.flush()

    async def evaluate(claim: ClaimedCase, heartbeat: Any) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return result_for(claim, worker_id)

    def progress(event: WorkerProgress) -> None:
        outcome = event.outcome
        if outcome is None:
            write({"event": event.event, "lost": True})
            return
        write(
            {
                "event": event.event,
                "work_id": getattr(outcome, "work_id", None),
                "status": outcome.status,
                "attempt": outcome.attempt,
            }
        )

    async def main() -> Any:
        database = AsyncDatabase(url)
        try:
            # No ready() here: run() opens the service with the worker's whole budget.
            return await AsyncWorker(
                AsyncCampaignService(database),
                campaign_id,
                worker_id,
                evaluate,
                concurrency=8,
                lease_seconds=lease_seconds,
                retry_base_seconds=0,
                until_finished=True,
                poll_seconds=0.2,
                progress=progress,
                outage=OUTAGE,
            ).run()
        finally:
            await database.dispose()

    write({"event": "start", "pid": os.getpid(), "worker": worker_id})
    try:
        summary = asyncio.run(main())
    except BaseException as error:
        write({"event": "died", "error": f"{type(error).__name__}: {error}"[:500]})
        log.close()
        sys.exit(3)
    write(
        {
            "event": "finished",
            "cases": summary.cases,
            "lost": summary.lost,
            "lost_reports": summary.lost_reports,
            "report": summary.report.status if summary.report else None,
        }
    )
    log.close()
