#!/usr/bin/env python3
"""A ``/metrics`` scrape at 20 campaigns x 50,000 items: goal < 200 ms and <= 2x a bare
``GROUP BY campaign_id, status`` of the same counts.

The ledger holds 20 campaigns of 50,000 items, each part way (as the dashboard
benchmark's): 60 % succeeded, 5 % failed for good after 3 attempts, 2 % waiting
to retry, 0.5 % leased (a fifth of those leases expired), the rest pending;
the attempt history has the rows those states imply (one per succeeded item,
three per failed one, one per retrying one: 770,000 in all). The set-up is
plain SQL (``create()`` first), not timed.

Each scrape is ``GET /metrics`` through the real ASGI app (Starlette's test
client, in process, behind its token gate). Three figures per backend:

- **cold**: the server's first scrape, which counts the whole attempt history
  once (the running totals start there);
- **first minute**: scrapes right after it, which count the history's newest
  10,000 ids afresh each time (``COLD_SLACK_IDS``, until ``SETTLE_SECONDS`` pass);
- **steady**: scrapes a minute later (the app's clock moved on 61 s): only what
  the history gained since the last settled scrape is read. The goal is this one.

The reference, measured in the same run on the same database, rounds alternating
with the scrapes': ``SELECT campaign_id, status, count(*) FROM
benchmark_campaign_work GROUP BY campaign_id, status`` through the bare driver
(sqlite3 / psycopg), the one aggregate any per-campaign status metric needs.

    .venv/bin/python benchmarks/bench_metrics.py [--campaigns 20] [--items 50000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _campaigns import plan  # noqa: E402
from _figures import (  # noqa: E402
    Figure,
    figure,
    postgres_database,
    postgres_server,
    psycopg_dsn,
    skipped,
)

from benchledger.db import Database  # noqa: E402
from benchledger.domain.canonical import canonical_json, sha256_text  # noqa: E402
from benchledger.services.campaigns import CampaignService  # noqa: E402

GOAL = "< 200 ms, <= 2x"
REFERENCE = "bare GROUP BY campaign_id, status"
REFERENCE_SQL = (
    "SELECT campaign_id, status, count(*) FROM benchmark_campaign_work GROUP BY campaign_id, status"
)
TOKEN = "bench-token"

# Each item's state by its position n (1-based, in (locale, case) order) of the campaign.
_STATES = """
UPDATE benchmark_campaign_work SET
  status = CASE
    WHEN r.n <= :ok THEN 'succeeded' WHEN r.n <= :failed THEN 'failed'
    WHEN r.n <= :retry THEN 'retry_wait' WHEN r.n <= :leased THEN 'leased'
    ELSE 'pending' END,
  attempts = CASE
    WHEN r.n <= :ok THEN 1 WHEN r.n <= :failed THEN 3 WHEN r.n <= :leased THEN 1 ELSE 0 END,
  result_json = CASE WHEN r.n <= :ok THEN :text END,
  result_sha256 = CASE WHEN r.n <= :ok THEN :digest END,
  last_error_code = CASE
    WHEN r.n > :ok AND r.n <= :failed THEN 'bench.broken'
    WHEN r.n > :failed AND r.n <= :retry THEN 'bench.flaky' END,
  next_attempt_at = CASE WHEN r.n > :failed AND r.n <= :retry THEN :now + 600
    ELSE next_attempt_at END,
  lease_owner = CASE WHEN r.n > :retry AND r.n <= :leased THEN 'bench-worker' END,
  lease_token = CASE WHEN r.n > :retry AND r.n <= :leased THEN 'token-' || r.n END,
  leased_at = CASE WHEN r.n > :retry AND r.n <= :leased THEN :now - 400 END,
  lease_expires_at = CASE
    WHEN r.n > :retry AND r.n <= :expired THEN :now - 100
    WHEN r.n > :expired AND r.n <= :leased THEN :now + 200 END,
  updated_at = :now
FROM (
  SELECT work_id, row_number() OVER (ORDER BY target_locale, suite_case_key) AS n
  FROM benchmark_campaign_work WHERE campaign_id = :c
) AS r
WHERE benchmark_campaign_work.work_id = r.work_id
"""
# The history those states imply: (status, attempt, outcome, error code).
_HISTORY = (
    ("succeeded", 1, "succeeded", None),
    ("failed", 1, "retry_scheduled", "bench.broken"),
    ("failed", 2, "retry_scheduled", "bench.broken"),
    ("failed", 3, "failed", "bench.broken"),
    ("retry_wait", 1, "retry_scheduled", "bench.flaky"),
)
_INSERT_HISTORY = """
INSERT INTO benchmark_campaign_attempts
  (campaign_id, work_id, attempt, worker_id, claimed_at, finished_at, outcome, error_code,
   duration_seconds)
SELECT campaign_id, work_id, :attempt, 'bench-worker', :now - 3600, :now - 60, :outcome,
  :code, 0.5
FROM benchmark_campaign_work WHERE campaign_id = :c AND status = :status
"""


def _part_way(db: Database, campaign_id: str, items: int, now: float) -> None:
    """Set-up only (plain SQL): the campaign's states and their attempt history."""
    ok = items * 60 // 100
    failed = ok + items * 5 // 100
    retry = failed + items * 2 // 100
    leased = retry + items // 200
    expired = retry + items // 1000
    text = canonical_json({"score": 0.5, "setup": True})
    with db.engine.begin() as connection:
        connection.execute(
            sa.text(_STATES),
            dict(
                c=campaign_id,
                ok=ok,
                failed=failed,
                retry=retry,
                leased=leased,
                expired=expired,
                now=now,
                text=text,
                digest=sha256_text(text),
            ),
        )
        for status, attempt, outcome, code in _HISTORY:
            connection.execute(
                sa.text(_INSERT_HISTORY),
                dict(c=campaign_id, status=status, attempt=attempt, outcome=outcome, code=code,
                     now=now),
            )  # fmt: skip


def _ledger(url: str, campaigns: int, items: int) -> int:
    """The ledger: ``campaigns`` campaigns of ``items`` items, part way; history rows."""
    db = Database(url)
    db.upgrade()
    service = CampaignService(db)
    now = time.time()
    for index in range(campaigns):
        campaign_id = service.create(*plan(items), name=f"bench-{index:02d}")
        _part_way(db, campaign_id, items, now)
    with db.engine.begin() as connection:
        history = int(
            connection.execute(sa.text("SELECT count(*) FROM benchmark_campaign_attempts")).scalar()
            or 0
        )
    if db.dialect_name == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("VACUUM ANALYZE")
    db.dispose()
    return history


def _reference(url: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The bare aggregate (and how to close its connection)."""
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(sa.make_url(url).database or "")
        return lambda: connection.execute(REFERENCE_SQL).fetchall(), connection.close
    import psycopg

    pg = psycopg.connect(psycopg_dsn(url), autocommit=True)
    return lambda: pg.execute(REFERENCE_SQL).fetchall(), pg.close


def _ms(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _alternating(
    scrape: Callable[[], Any], reference: Callable[[], Any], repeat: int
) -> tuple[list[float], list[float]]:
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(repeat):
        theirs.append(_ms(reference))
        mine.append(_ms(scrape))
    return mine, theirs


class _Clock:
    """Wall-clock time, moved on at will: a minute passes without waiting for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def measure(url: str, backend: str, campaigns: int, items: int, repeat: int) -> list[Figure]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from benchledger.dashboard import DashboardSettings, create_app

    history = _ledger(url, campaigns, items)
    reference, close = _reference(url)
    reference()  # warm: the table's pages in the cache
    clock = _Clock()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    sizes = f"{campaigns} x {items:,} items, {history:,} history rows"
    rows: list[Figure] = []
    try:
        with TestClient(create_app(url, DashboardSettings(token=TOKEN), clock=clock)) as client:

            def scrape() -> None:
                response = client.get("/metrics", headers=headers)
                assert response.status_code == 200, response.text
                assert response.text.count("benchledger_campaign_work_items{") == campaigns

            cold = _ms(scrape)
            cold_reference = _ms(reference)
            rows.append(
                figure(
                    f"{backend} /metrics, cold (counts the whole history once)",
                    "ms",
                    cold,
                    cold_reference,
                    REFERENCE,
                    "(once per server)",
                    sizes,
                )
            )
            for name, advance in (("first minute", 0.0), ("steady", 61.0)):
                clock.offset += advance
                scrape()  # settles what a minute ago's scrape saw
                mine, theirs = _alternating(scrape, reference, repeat)
                note = "the history's newest 10,000 ids recounted" if advance == 0 else ""
                rows.append(
                    figure(
                        f"{backend} /metrics, {name}",
                        "ms",
                        statistics.median(mine),
                        statistics.median(theirs),
                        REFERENCE,
                        GOAL if advance else "-",
                        f"{sizes}; median of {repeat} alternating rounds, slowest "
                        f"{max(mine):.0f} ms" + (f"; {note}" if note else ""),
                    )
                )
    finally:
        close()
    return rows


def figures(campaigns: int = 20, items: int = 50_000, repeat: int = 15) -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / f'metrics-{uuid.uuid4().hex[:6]}.db'}"
        rows += measure(url, "SQLite", campaigns, items, repeat)
    server = postgres_server()
    if server is None:
        rows.append(
            skipped(
                "PostgreSQL /metrics",
                "ms",
                REFERENCE,
                GOAL,
                "no PostgreSQL server (BENCHLEDGER_TEST_PG_URL)",
            )
        )
    else:
        with postgres_database(server) as url:
            rows += measure(url, "PostgreSQL", campaigns, items, repeat)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--campaigns", type=int, default=20)
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    from run_all import render

    print(render(figures(args.campaigns, args.items, args.repeat)))


if __name__ == "__main__":
    main()
