"""What flow control costs a claim: a capped campaign's claim -> complete cycle against an
uncapped campaign's, same database, same run.

Two campaigns of the same size sit in one database: one without caps (the
reference: its claim reads the campaign's controls once, by key, and stays on
the SKIP LOCKED path), one with ``max_concurrent_leases`` and
``max_claims_per_minute`` both set far above what the loop reaches (so every
claim takes the campaign row's lock, counts live leases and the last minute's
claims, logs itself, and prunes). Rounds alternate between them; the figure is
the median over rounds of the mean time per claim + complete cycle, one worker.
SQLite always; PostgreSQL when the run has a server.

    .venv/bin/python benchmarks/bench_flow_control.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _campaigns import plan, result
from _figures import Figure, figure, postgres_database, postgres_server, skipped

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService

ITEMS = 2_000
ROUNDS = 5
CYCLES = 100  # per round and campaign
CAP = 1_000_000  # never reached: the cost of checking, not of waiting


def _cycles(service: CampaignService, campaign_id: str, cycles: int) -> float:
    started = time.perf_counter()
    for _ in range(cycles):
        claim = service.claim(campaign_id, "bench-worker")
        assert claim is not None
        service.complete(claim, result(claim))
    return (time.perf_counter() - started) / cycles


def measure(url: str) -> tuple[float, float]:
    """(capped, uncapped) median seconds per cycle."""
    database = Database(url)
    database.upgrade()
    try:
        service = CampaignService(database)
        free = service.create(*plan(ITEMS))
        capped = service.create(*plan(ITEMS), max_concurrent_leases=CAP, max_claims_per_minute=CAP)
        _cycles(service, free, 10)  # warm both paths
        _cycles(service, capped, 10)
        free_times, capped_times = [], []
        for _ in range(ROUNDS):
            free_times.append(_cycles(service, free, CYCLES))
            capped_times.append(_cycles(service, capped, CYCLES))
        assert service.controls(capped).claims_last_minute > 0
        return statistics.median(capped_times), statistics.median(free_times)
    finally:
        database.dispose()


@contextmanager
def _sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as root:
        yield f"sqlite:///{Path(root) / 'flow.sqlite'}"


def _row(backend: str, capped: float, free: float) -> Figure:
    return figure(
        f"{backend} claim -> complete, campaign with both caps",
        "ms/cycle",
        round(capped * 1000, 3),
        round(free * 1000, 3),
        "the same cycle on an uncapped campaign",
        "<= 1.5x",
        f"{ITEMS} items per campaign, {ROUNDS} alternating rounds of {CYCLES} cycles, "
        "one worker; caps set far above the loop's pace",
    )


def figures() -> list[Figure]:
    rows = []
    with _sqlite_url() as url:
        rows.append(_row("SQLite", *measure(url)))
    server = postgres_server()
    if server is None:
        rows.append(
            skipped(
                "PostgreSQL claim -> complete, campaign with both caps",
                "ms/cycle",
                "the same cycle on an uncapped campaign",
                "<= 1.5x",
                "no PostgreSQL server in this run (scripts/with-postgres.sh)",
            )
        )
    else:
        with postgres_database(server) as url:
            rows.append(_row("PostgreSQL", *measure(url)))
    return rows


def main() -> int:
    for row in figures():
        print(
            f"{row['figure']}: {row['benchledger']} {row['unit']} vs {row['reference']} "
            f"({row['reference_name']}), ratio {row['ratio'] and round(row['ratio'], 2)}, "
            f"goal {row['goal']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
