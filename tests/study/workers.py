"""Worker processes for the concurrency tests (importable by ``multiprocessing`` spawn)."""

from __future__ import annotations

import time
from typing import Any

from benchledger.db import Database
from benchledger.errors import StudyError
from benchledger.services.studies import StudyService


def admit_until_exhausted(
    url: str, study_id: str, trial_id: str, worker: int, start: Any, results: Any
) -> None:
    """Admit, complete and admit again until the study has no attempt slot left.

    Puts ``(worker, admitted run ids, refusals)`` on ``results``. Races are
    expected: a stale revision or another process's active child means reload
    and try again. Every process waits at ``start`` so that they really race.
    """
    db = Database(url)
    service = StudyService(db)
    admitted: list[str] = []
    refusals = 0
    start.wait()
    try:
        for attempt in range(2_000):
            page = service.get("alice", study_id)
            if page.remaining.attempt_slots == 0:
                break
            try:
                admission = service.admit(
                    "alice",
                    study_id,
                    revision=page.study.revision,
                    admission_epoch=page.study.admission_epoch,
                    trial_id=trial_id,
                    request_key=f"worker{worker}-{attempt:05d}",
                )
            except StudyError as error:
                if error.code not in ("stale", "unavailable"):
                    raise
                refusals += 1
                time.sleep(0.001 * (worker + 1))
                continue
            admitted.append(admission.run.id)
            time.sleep(0.005)  # let the others find an active child
            service.report_run("alice", admission.run.id, "completed")
        else:
            raise AssertionError("the budget was never exhausted")
    finally:
        db.dispose()
    results.put((worker, admitted, refusals))
