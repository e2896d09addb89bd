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

A third side explains what bounds the figure: benchledger's own statements of
each round (captured as sent, SQL text and parameters) replayed on the bare
driver (sqlite3; psycopg), transaction by transaction with the same commits, on
a copy of the ledger taken before the first round (a file copy; ``CREATE
DATABASE ... TEMPLATE``), right after that round.

Statements per write are counted with SQLAlchemy's ``before_cursor_execute``
event (BEGIN included, COMMIT is not a statement), for benchledger and Optuna.

Optuna is in the ``bench`` extra (``pip install -e '.[bench]'``, ``make bench``
installs it); without it the Optuna figures are reported as not measured.

    .venv/bin/python benchmarks/bench_study.py
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from _figures import (
    Figure,
    figure,
    postgres_database,
    postgres_server,
    psycopg_dsn,
    skipped,
)
from sqlalchemy import event

from benchledger.db import SQLITE_BUSY_TIMEOUT_SECONDS, Database, resolve_url
from benchledger.domain.study import Budget, RunState, SelectionPolicy
from benchledger.domain.study_evidence import MetricDefinition
from benchledger.services.studies import StudyService

# Fine alternation: a commit's fsync on a shared disk varies by several times within seconds.
ROUNDS = 15
CYCLES_PER_ROUND = 20
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


class _Capture(_Counter):
    """Also benchledger's transactions as sent (statement, parameters), while ``on``
    (one listener: the measured side pays for no more than Optuna's)."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self.on = False
        self.transactions: list[list[tuple[str, Any]]] = []
        self._current: list[tuple[str, Any]] = []
        event.listen(engine, "commit", self._committed)

    def _seen(self, *args: Any, **kwargs: Any) -> None:
        super()._seen()
        if self.on:
            self._current.append((args[2], args[3]))

    def _committed(self, _connection: Any) -> None:
        if self.on and self._current:
            self.transactions.append(self._current)
        self._current = []

    def take(self) -> list[list[tuple[str, Any]]]:
        taken, self.transactions = self.transactions, []
        return taken


class _Ours:
    """An open study with one trial; ``cycle()`` admits, reports and (next time) settles."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)
        self.db.upgrade()
        self.service = StudyService(self.db)
        self.capture = _Capture(self.db.engine)
        self.counter: _Counter = self.capture
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


class _SqliteReplay:
    """benchledger's captured transactions on bare sqlite3, on a copy of its file."""

    def __init__(self, ours: _Ours, copy: Path) -> None:
        source = ours.db.sqlite_path
        assert source is not None
        with ours.db.engine.connect() as connection:
            synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar()
        ours.db.dispose()  # the last connection closed checkpoints the WAL into the file
        shutil.copyfile(source, copy)
        self.connection = sqlite3.connect(copy, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode = WAL")
        self.connection.execute(f"PRAGMA synchronous = {int(synchronous or 0)}")
        self.connection.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
        self.connection.execute("PRAGMA foreign_keys = ON")

    def replay(self, transactions: list[list[tuple[str, Any]]]) -> float:
        connection = self.connection
        started = time.perf_counter()
        for transaction in transactions:
            for statement, parameters in transaction:
                connection.execute(statement, parameters).fetchall()
            connection.execute("COMMIT")
        return time.perf_counter() - started

    def close(self) -> None:
        self.connection.close()


class _PostgresReplay:
    """benchledger's captured transactions on bare psycopg, on a copy of its database."""

    def __init__(self, ours: _Ours, server: str) -> None:
        import psycopg

        source = sa.make_url(ours.db.url).database
        self.admin = sa.create_engine(resolve_url(server), isolation_level="AUTOCOMMIT")
        self.name = f"bench_{uuid.uuid4().hex[:10]}"
        ours.db.dispose()  # a template database has no other connection
        with self.admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{self.name}" TEMPLATE "{source}"')
        url = sa.make_url(ours.db.url).set(database=self.name).render_as_string(False)
        self.connection = psycopg.connect(psycopg_dsn(url))

    def replay(self, transactions: list[list[tuple[str, Any]]]) -> float:
        connection = self.connection
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for transaction in transactions:
                for statement, parameters in transaction:
                    cursor.execute(statement, parameters)
                    if cursor.description is not None:
                        cursor.fetchall()
                connection.commit()
        return time.perf_counter() - started

    def close(self) -> None:
        self.connection.close()
        with self.admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        self.admin.dispose()


_Replay = _SqliteReplay | _PostgresReplay


def _timed(cycle: Callable[[], None], count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        cycle()
    return time.perf_counter() - started


@contextmanager
def _sides(
    ours_url: str, optuna_url: str | None, replay: Callable[[_Ours], _Replay]
) -> Iterator[tuple[_Ours, _Optuna | None, _Replay]]:
    """The three sides, warmed up; the replay's copy is taken after the warm-up."""
    ours = _Ours(ours_url)
    reference = _Optuna(optuna_url) if optuna_url is not None else None
    copy: _Replay | None = None
    try:
        _timed(ours.cycle, WARMUP)
        if reference is not None:
            _timed(reference.cycle, WARMUP)
        copy = replay(ours)
        ours.counter.counts.clear()
        if reference is not None:
            reference.counter.counts.clear()
        yield ours, reference, copy
    finally:
        ours.close()
        if reference is not None:
            reference.close()
        if copy is not None:
            copy.close()


def _measure(
    backend: str, ours_url: str, optuna_url: str | None, replay: Callable[[_Ours], _Replay]
) -> list[Figure]:
    """Cycles per second of each side (alternating rounds), as two rows."""
    with _sides(ours_url, optuna_url, replay) as (ours, reference, copy):
        ours_seconds = reference_seconds = replay_seconds = 0.0
        for _ in range(ROUNDS):
            ours.capture.on = True
            ours_seconds += _timed(ours.cycle, CYCLES_PER_ROUND)
            ours.capture.on = False
            if reference is not None:
                reference_seconds += _timed(reference.cycle, CYCLES_PER_ROUND)
            replay_seconds += copy.replay(ours.capture.take())
        cycles = ROUNDS * CYCLES_PER_ROUND
        per = {k: v / cycles for k, v in ours.counter.counts.items()}
        counts = f"admit {per.get('admit', 0):.0f}, report_run {per.get('report_run', 0):.0f}"
        note = f"{cycles} cycles in {ROUNDS} alternating rounds; statements per write: {counts}"
        if reference is not None:
            theirs = {k: v / cycles for k, v in reference.counter.counts.items()}
            note += f"; Optuna ask {theirs.get('ask', 0):.0f}, tell {theirs.get('tell', 0):.0f}"
        ours_rate = cycles / ours_seconds
        rows = [
            figure(
                f"study admissions (admit -> report_run -> settle) vs Optuna ({backend})",
                "cycles/s",
                ours_rate,
                None if reference is None else cycles / reference_seconds,
                REFERENCE,
                GOAL,
                note if reference is not None else f"{note}; Optuna not measured: {_MISSING}",
            ),
            figure(
                f"study admissions vs their own statements on the bare driver ({backend})",
                "cycles/s",
                ours_rate,
                cycles / replay_seconds,
                "same transactions replayed on the bare driver",
                "(what bounds the figure)",
                "the bare replay sends the same statements and commits, with no Python above"
                " the driver: its rate is the ceiling of this SQL on this machine",
            ),
        ]
        return rows


_MISSING = "optuna is not installed (pip install -e '.[bench]')"


def _optuna_installed() -> bool:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


def _sqlite_wal_file(path: Path) -> str:
    """A SQLite file in WAL mode (as benchledger's upgrade leaves its own), as a URL."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()
    return f"sqlite:///{path}"


def figures() -> list[Figure]:
    installed = _optuna_installed()
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-study-") as workdir:
        root = Path(workdir)
        rows += _measure(
            "SQLite, WAL",
            f"sqlite:///{root / 'ours.sqlite'}",
            _sqlite_wal_file(root / "optuna.sqlite") if installed else None,
            lambda ours: _SqliteReplay(ours, root / "replay.sqlite"),
        )
    server = postgres_server()
    if server is None:
        rows.append(
            skipped(
                "study admissions (admit -> report_run -> settle) vs Optuna (PostgreSQL)",
                "cycles/s",
                REFERENCE,
                GOAL,
                "no PostgreSQL",
            )
        )
        return rows
    with postgres_database(server) as ours_url, postgres_database(server) as optuna_url:
        rows += _measure(
            "PostgreSQL",
            ours_url,
            optuna_url if installed else None,
            lambda ours: _PostgresReplay(ours, server),
        )
    return rows


def main() -> int:
    from run_all import render

    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
