"""Study admissions against Optuna's RDBStorage ask + tell, on the same backend, same run.

benchledger, one cycle: ``StudyService.admit`` of the study's one trial, then
``report_run(run, completed)``; the next ``admit`` settles that reservation (as
``reconcile`` would), so every cycle writes an admission, a run report and a
settlement. The study's limits are roomy; the owner admits an external trainer's
material. Each write is its own transaction (BEGIN IMMEDIATE on SQLite).

The reference, in the same process: Optuna's ``RDBStorage`` (through
``optuna.create_study``, RandomSampler, no parameters) ``ask()`` then
``tell(trial, value)``, on a SQLite file with the same settings (WAL, default
``synchronous``, the same busy timeout) or on the same PostgreSQL server (a
separate database). Rounds alternate between the two to share the machine's
load fairly; the rate is cycles over the summed time of all rounds.

Statements per write are counted with SQLAlchemy's ``before_cursor_execute``
event (BEGIN included, COMMIT is not a statement), for benchledger and Optuna.

Optuna is in the ``bench`` extra (``pip install -e '.[bench]'``, ``make bench``
installs it); without it the Optuna figures are reported as not measured.

    .venv/bin/python benchmarks/bench_study.py
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from _figures import Figure, figure, postgres_database, postgres_server, skipped
from sqlalchemy import event

from benchledger.db import SQLITE_BUSY_TIMEOUT_SECONDS, Database
from benchledger.domain.study import Budget, RunState, SelectionPolicy
from benchledger.domain.study_evidence import MetricDefinition
from benchledger.services.studies import StudyService

ROUNDS = 3
CYCLES_PER_ROUND = 100
WARMUP = 20
OWNER = "bench-owner"
ENVELOPE = Budget(1, 60, 1_000, 500)
ROOMY = Budget(10**9, 10**12, 10**15, 10**15)
GOAL = ">= 4x"
REFERENCE = "Optuna RDBStorage ask + tell"


class _Counter:
    """Statements sent on an engine, by the label of the write in progress."""

    def __init__(self, engine: sa.Engine) -> None:
        self.label = ""
        self.counts: dict[str, int] = {}
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any, **_kwargs: Any) -> None:
        if self.label:
            self.counts[self.label] = self.counts.get(self.label, 0) + 1


class _Ours:
    """An open study with one trial; ``cycle()`` admits, reports and (next time) settles."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)
        self.db.upgrade()
        self.service = StudyService(self.db)
        self.counter = _Counter(self.db.engine)
        service = self.service
        service.bootstrap_owner(OWNER)
        material = service.register_material(
            OWNER, recipe={"lr": 0.01}, envelope=ENVELOPE, trainer_id="bench", builtin=False
        )
        metric = MetricDefinition("accuracy", "Validation accuracy", "maximize")
        study = service.create(
            OWNER,
            name="bench",
            limits=ROOMY,
            policy=SelectionPolicy(metric.sha256, "last"),
            request_key="bench-create",
        )
        trial = service.prepare_trial(
            OWNER,
            study.id,
            revision=study.revision,
            material=material.ref,
            replicate=0,
            request_key="bench-trial",
        )
        study = service.open_study(
            OWNER, study.id, revision=study.revision + 1, request_key="bench-open"
        )
        self.study_id, self.trial_id = study.id, trial.id
        self.revision, self.epoch = study.revision, study.admission_epoch
        self.number = 0

    def cycle(self) -> None:
        self.number += 1
        self.counter.label = "admit"
        admission = self.service.admit(
            OWNER,
            self.study_id,
            revision=self.revision,
            admission_epoch=self.epoch,
            trial_id=self.trial_id,
            request_key=f"bench-admit-{self.number:08d}",
        )
        self.revision += 1
        self.counter.label = "report_run"
        self.service.report_run(OWNER, admission.run.id, RunState.COMPLETED, custody_ceased=None)
        self.counter.label = ""

    def close(self) -> None:
        self.db.dispose()


class _Optuna:
    """An Optuna study on RDBStorage; ``cycle()`` is one ``ask()`` and one ``tell()``."""

    def __init__(self, url: str) -> None:
        import optuna

        optuna.logging.set_verbosity(logging.WARNING)
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
        self.storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        self.counter = _Counter(self.storage.engine)
        self.study = optuna.create_study(
            storage=self.storage,
            study_name="bench",
            sampler=optuna.samplers.RandomSampler(seed=0),
        )

    def cycle(self) -> None:
        self.counter.label = "ask"
        trial = self.study.ask()
        self.counter.label = "tell"
        self.study.tell(trial, 0.5)
        self.counter.label = ""

    def close(self) -> None:
        self.storage.engine.dispose()


def _timed(cycle: Callable[[], None], count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        cycle()
    return time.perf_counter() - started


def _optuna_missing() -> str | None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return "optuna is not installed (pip install -e '.[bench]')"
    return None


def _measure(ours_url: str, optuna_url: str | None) -> tuple[float, float | None, str]:
    """Cycles per second of each (alternating rounds), and the statement counts."""
    ours = _Ours(ours_url)
    reference = _Optuna(optuna_url) if optuna_url is not None else None
    try:
        _timed(ours.cycle, WARMUP)
        if reference is not None:
            _timed(reference.cycle, WARMUP)
        ours.counter.counts.clear()
        if reference is not None:
            reference.counter.counts.clear()
        ours_seconds = reference_seconds = 0.0
        for _ in range(ROUNDS):
            ours_seconds += _timed(ours.cycle, CYCLES_PER_ROUND)
            if reference is not None:
                reference_seconds += _timed(reference.cycle, CYCLES_PER_ROUND)
        cycles = ROUNDS * CYCLES_PER_ROUND
        per = {k: v / cycles for k, v in ours.counter.counts.items()}
        note = f"{cycles} cycles; statements per write: admit {per.get('admit', 0):.0f}, "
        note += f"report_run {per.get('report_run', 0):.0f}"
        if reference is not None:
            theirs = {k: v / cycles for k, v in reference.counter.counts.items()}
            note += f"; Optuna ask {theirs.get('ask', 0):.0f}, tell {theirs.get('tell', 0):.0f}"
        return (
            cycles / ours_seconds,
            None if reference is None else cycles / reference_seconds,
            note,
        )
    finally:
        ours.close()
        if reference is not None:
            reference.close()


def _row(backend: str, ours: float, theirs: float | None, note: str, why: str | None) -> Figure:
    name = f"study admissions (admit -> report_run -> settle) vs Optuna ask + tell ({backend})"
    if theirs is None:
        note = f"{note}; Optuna not measured: {why}"
    return figure(name, "cycles/s", ours, theirs, REFERENCE, GOAL, note)


def _sqlite_wal_file(path: Path) -> str:
    """A SQLite file in WAL mode (as benchledger's upgrade leaves its own), as a URL."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()
    return f"sqlite:///{path}"


def figures() -> list[Figure]:
    missing = _optuna_missing()
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-study-") as workdir:
        root = Path(workdir)
        optuna_url = None if missing else _sqlite_wal_file(root / "optuna.sqlite")
        ours, theirs, note = _measure(f"sqlite:///{root / 'ours.sqlite'}", optuna_url)
        rows.append(_row("SQLite, WAL", ours, theirs, note, missing))
    server = postgres_server()
    if server is None:
        rows.append(
            skipped(
                "study admissions (admit -> report_run -> settle) vs Optuna ask + tell "
                "(PostgreSQL)",
                "cycles/s",
                REFERENCE,
                GOAL,
                "no PostgreSQL",
            )
        )
        return rows
    with postgres_database(server) as ours_url, postgres_database(server) as optuna_url:
        ours, theirs, note = _measure(ours_url, None if missing else optuna_url)
        rows.append(_row("PostgreSQL", ours, theirs, note, missing))
    return rows


def main() -> int:
    from run_all import render

    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
