"""`benchledger campaign work --workers 4` against the library run by hand in 4 processes.

Both drain a fresh campaign of the same size with the same instant evaluator
(``_evaluators:instant``) and finalize its report, on PostgreSQL (SQLite when no
server is given). benchledger: the real command line, ``benchledger --url URL
campaign work ID --workers 4 --evaluator _evaluators:instant``, as one
subprocess. The reference: 4 subprocesses, each ``Worker(CampaignService(
Database(URL)), ID, name, instant).run()`` (claim, evaluate, complete until
nothing is left; one of them finalizes the report). Items per second is the
campaign's items / wall time from launching the processes to the last exit, so
both include starting their interpreters.

    BENCHLEDGER_TEST_PG_URL=... .venv/bin/python benchmarks/bench_pool.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from _campaigns import plan
from _figures import Figure, figure, postgres_database, postgres_server

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService

HERE = Path(__file__).resolve().parent
ITEMS = 3_000
WORKERS = 4
ROUNDS = 2

_BY_HAND = """
import sys
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.workers.loop import Worker
from _evaluators import instant
url, campaign_id, name = sys.argv[1:4]
database = Database(url)
Worker(CampaignService(database), campaign_id, name, instant).run()
database.dispose()
"""


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


def _campaign(url: str) -> str:
    db = Database(url)
    try:
        db.upgrade()
        policy, suite = plan(ITEMS)
        return CampaignService(db).create(policy, suite)
    finally:
        db.dispose()


def _finished(url: str, campaign_id: str) -> bool:
    db = Database(url)
    try:
        status = CampaignService(db).status(campaign_id)
        return status.complete and status.report_finalization["status"] == "succeeded"
    finally:
        db.dispose()


def _pool(url: str, campaign_id: str) -> float:
    command = [
        str(Path(sys.executable).with_name("benchledger")),
        "--url",
        url,
        "campaign",
        "work",
        campaign_id,
        "--workers",
        str(WORKERS),
        "--evaluator",
        "_evaluators:instant",
    ]
    started = time.perf_counter()
    subprocess.run(
        command, env=_environment(), cwd=HERE, check=True, capture_output=True, timeout=600
    )
    elapsed = time.perf_counter() - started
    assert _finished(url, campaign_id)
    return ITEMS / elapsed


def _by_hand(url: str, campaign_id: str) -> float:
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _BY_HAND, url, campaign_id, f"by-hand-{index}"],
            env=_environment(),
            cwd=HERE,
        )
        for index in range(WORKERS)
    ]
    for process in processes:
        assert process.wait(timeout=600) == 0
    elapsed = time.perf_counter() - started
    assert _finished(url, campaign_id)
    return ITEMS / elapsed


def figures() -> list[Figure]:
    server = postgres_server()
    backend = "PostgreSQL" if server else "SQLite"
    rates: dict[str, list[float]] = {"pool": [], "hand": []}
    for _round in range(ROUNDS):  # alternate: neither side always runs on a warmer machine
        for side, run in (("pool", _pool), ("hand", _by_hand)):
            database: AbstractContextManager[str]
            if server:
                database = postgres_database(server)
            else:
                directory = tempfile.mkdtemp(prefix="bench-pool-")
                database = nullcontext(f"sqlite:///{directory}/ledger.sqlite")
            with database as url:
                rates[side].append(run(url, _campaign(url)))
    pool, hand = max(rates["pool"]), max(rates["hand"])
    return [
        figure(
            f"campaign work --workers {WORKERS} ({backend})",
            "items/s",
            pool,
            hand,
            f"the library by hand in {WORKERS} processes",
            ">= 0.8x",
            f"{ITEMS:,} items, instant evaluator, report included, best of {ROUNDS} each;"
            " wall time includes starting the processes",
        )
    ]


def main() -> int:
    from run_all import render

    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
