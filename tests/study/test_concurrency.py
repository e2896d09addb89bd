"""Concurrent admissions from several processes never exceed a study's budget."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchledger.domain.study import Budget
from benchledger.repositories.studies import StudyRepository

from .helpers import LIMITS, OWNER, Kit
from .workers import admit_until_exhausted

PROCESSES = 4
SLOTS = 9


@pytest.mark.slow
def test_concurrent_admissions_never_exceed_the_budget(kit: Kit) -> None:
    limits = Budget(SLOTS, 100_000, 10_000_000, 10_000_000)
    study, trial, _ = kit.ready(limits=limits)
    context = multiprocessing.get_context("spawn")
    start, queue = context.Barrier(PROCESSES), context.Queue()
    processes = [
        context.Process(
            target=admit_until_exhausted,
            args=(kit.db.url, study.id, trial.id, worker, start, queue),
        )
        for worker in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    results = [queue.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    admitted = [run_id for _, runs, _ in results for run_id in runs]
    # The processes did race: some requests lost to a concurrent admission.
    assert sum(refusals for _, _, refusals in results) > 0
    assert len(admitted) == len(set(admitted)) == SLOTS
    page = kit.service.get(OWNER, study.id)
    assert page.charged.attempt_slots == SLOTS
    assert page.charged.fits_within(limits)
    assert page.page.total == SLOTS
    assert {item.run_id for item in page.reservations} == set(admitted)
    with kit.db.read() as session:
        assert StudyRepository(session).charged_total(study.id) == page.charged
    # Every admission was audited exactly once, each at its own revision.
    admits = [row for row in kit.audit(study.id) if row[0] == "studies.admit"]
    assert len(admits) == SLOTS


def test_concurrent_replays_of_one_request_make_one_study(kit: Kit) -> None:
    """Racing requests with one key: one study, and every caller gets its receipt."""
    start = threading.Barrier(PROCESSES)
    policy = kit.policy()

    def create() -> str:
        start.wait()
        study = kit.service.create(
            OWNER, name="raced", limits=LIMITS, policy=policy, request_key="raced-create"
        )
        return study.id

    with ThreadPoolExecutor(PROCESSES) as pool:
        ids = set(pool.map(lambda _: create(), range(PROCESSES)))
    assert len(ids) == 1
    assert [item.id for item in kit.service.list(OWNER).studies] == list(ids)
