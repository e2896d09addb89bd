"""Helpers of the chaos tests: real worker processes and a PostgreSQL server of their own.

Every test runs real ``Worker`` processes (spawned) against a real database,
does something hostile to them or to the database, and then checks the
ledger's promises: nothing lost, nothing completed twice, attempts within the
maximum, the report finalized exactly once, and no worker died.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from glob import glob
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.services.campaigns import CampaignService
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory

from .procs import run_async_worker, run_worker

MAX_ATTEMPTS = 6


def chaos_plan(cases: int, locales: tuple[str, ...] = ("de-DE", "fr-FR")) -> CampaignPlan:
    suite = SuiteFactory(
        cases=[
            SuiteCaseFactory(key=f"chaos-{index:04d}", source_text=f"Page {index} was saved.")
            for index in range(cases)
        ]
    )
    return CampaignPlan(CampaignPolicyFactory(suite=suite, required_locales=locales), suite)


class Crew:
    """Worker processes on one campaign, their logs, and the checks of the outcome."""

    def __init__(
        self,
        db: Database,
        campaign_id: str,
        logs: Path,
        *,
        evaluate_seconds: float = 0.01,
        lease_seconds: float = 2.0,
        report_seconds: float = 0.0,
    ) -> None:
        self.db = db
        self.campaign_id = campaign_id
        self.logs = logs
        self.settings = (evaluate_seconds, lease_seconds, report_seconds)
        self.context = multiprocessing.get_context("spawn")
        self.processes: dict[str, Any] = {}
        self.killed: set[str] = set()

    def start_async(self, count: int) -> None:
        """``count`` AsyncWorker processes (logged and checked as the others)."""
        for _ in range(count):
            worker_id = f"chaos-{len(self.processes)}"
            process = self.context.Process(
                target=run_async_worker,
                args=(
                    self.db.url,
                    self.campaign_id,
                    worker_id,
                    str(self.logs / f"{worker_id}.jsonl"),
                    self.settings[1],
                ),
            )
            process.start()
            self.processes[worker_id] = process

    def start(self, count: int) -> None:
        for _ in range(count):
            worker_id = f"chaos-{len(self.processes)}"
            process = self.context.Process(
                target=run_worker,
                args=(
                    self.db.url,
                    self.campaign_id,
                    worker_id,
                    str(self.logs / f"{worker_id}.jsonl"),
                    *self.settings,
                ),
            )
            process.start()
            self.processes[worker_id] = process

    def alive(self) -> list[str]:
        return [name for name, process in self.processes.items() if process.is_alive()]

    def kill(self, worker_id: str) -> None:
        process = self.processes[worker_id]
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)
            self.killed.add(worker_id)

    def wait(self, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        for name, process in self.processes.items():
            process.join(max(1.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                raise AssertionError(f"worker {name} did not finish in {timeout} s")

    def records(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.logs.glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    found.append({"worker": path.stem, **json.loads(line)})
        return found

    def check(self, plan: CampaignPlan, *, pool: bool = False) -> dict[str, Any]:
        """The ledger's promises after the storm; returns a few figures for the test."""
        records = self.records()
        died = [r for r in records if r["event"] == "died"]
        assert died == [], died
        for name, process in self.processes.items():
            if name not in self.killed:
                assert process.exitcode == 0, (name, process.exitcode)
        service = CampaignService(self.db)
        status = service.status(self.campaign_id)
        expected = {work.work_id for work in plan.work()}
        assert status.counts["succeeded"] == len(expected), status.counts
        with self.db.engine.connect() as connection:
            rows = connection.execute(
                sa.text(
                    "SELECT work_id, status, attempts, max_attempts, result_json "
                    "FROM benchmark_campaign_work WHERE campaign_id = :c"
                ),
                {"c": self.campaign_id},
            ).all()
            reports = connection.execute(
                sa.text("SELECT COUNT(*) FROM benchmark_campaign_reports WHERE campaign_id = :c"),
                {"c": self.campaign_id},
            ).scalar_one()
            state = connection.execute(
                sa.text(
                    "SELECT status, attempts, max_attempts, lease_losses"
                    " FROM benchmark_campaign_report_state "
                    "WHERE campaign_id = :c"
                ),
                {"c": self.campaign_id},
            ).one()
        assert {row.work_id for row in rows} == expected  # nothing lost
        assert all(row.status == "succeeded" for row in rows)
        assert all(1 <= row.attempts <= row.max_attempts for row in rows)
        # Nothing completed twice: one recorded success per item across every worker.
        successes = Counter(
            r["work_id"] for r in records if r["event"] == "case" and r.get("status") == "succeeded"
        )
        assert max(successes.values(), default=1) == 1, successes.most_common(3)
        # The stored result is the one a worker wrote (a killed worker may have
        # written it right before dying, without logging it).
        writers = {json.loads(row.result_json).get("worker") for row in rows}
        # A `campaign work` pool beside the crew writes the example evaluator's results.
        assert writers <= set(self.processes) | ({None} if pool else set())
        assert reports == 1  # the report finalized exactly once
        assert state.status == "succeeded" and 1 <= state.attempts <= state.max_attempts
        service.load_report(self.campaign_id)
        return {
            "lost": sum(r.get("lost", 0) for r in records if r["event"] == "finished"),
            "report_attempts": state.attempts,
            "report_lease_losses": state.lease_losses,
            "max_item_attempts": max(row.attempts for row in rows),
        }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresUnderTest:
    """A PostgreSQL server of the test's own, which the test may stop and start."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.workdir = Path(tempfile.mkdtemp(prefix="benchledger-chaos-pg-"))
        self.port = _free_port()
        self.as_postgres: list[str] = []
        if os.geteuid() == 0:
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
            os.chmod(self.workdir, 0o755)
            shutil.chown(self.workdir, "postgres")
        self._run("initdb", "-D", str(self.workdir / "data"), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-instructions")  # fmt: skip
        self.start()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_postgres, str(self.bindir / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def start(self) -> None:
        # A crash here is the server process's, not the machine's: fsync may stay off,
        # but every acknowledged commit must be in the WAL (synchronous_commit=on).
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.workdir} "
            "-c fsync=off -c synchronous_commit=on"
        )
        log = str(self.workdir / "server.log")
        self._run("pg_ctl", "-D", str(self.workdir / "data"), "-l", log, "-w", "-t", "60",
                  "-o", options, "start")  # fmt: skip

    def stop_immediately(self) -> None:
        """A crash: ``pg_ctl stop -m immediate`` (no checkpoint, sessions cut)."""
        self._run("pg_ctl", "-D", str(self.workdir / "data"), "-m", "immediate", "stop")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop_immediately()
        shutil.rmtree(self.workdir, ignore_errors=True)


def postgres_bindir() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None
