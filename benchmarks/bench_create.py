"""create() of a 100,000-item campaign against a bare executemany of the same rows.

benchledger: ``CampaignService.create(policy, suite)`` on an empty, upgraded ledger
(work ids derived and hashed, the policy, the suite, the campaign row, every
pending item and the report state stored in one transaction). The reference, in
the same run on a second empty ledger of the same schema: the campaign row, then
one bare DB-API ``executemany`` of exactly the rows ``create()`` stored (read back
from the first ledger), then ``COMMIT`` (sqlite3; psycopg).

    .venv/bin/python benchmarks/bench_create.py
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from _campaigns import plan
from _figures import Figure, figure, postgres_database, postgres_server, psycopg_dsn, skipped

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService

ITEMS = 100_000
_COLUMNS = (
    "work_id, campaign_id, target_locale, suite_case_key, status, attempts, max_attempts,"
    " next_attempt_at, created_at, updated_at"
)


def _ours(url: str) -> tuple[float, list[tuple[Any, ...]], tuple[Any, ...]]:
    """Seconds for create(); the stored work rows and campaign row (for the reference)."""
    db = Database(url)
    try:
        db.upgrade()
        service = CampaignService(db)
        policy, suite = plan(ITEMS)
        started = time.perf_counter()
        campaign_id = service.create(policy, suite)
        elapsed = time.perf_counter() - started
        with db.engine.connect() as connection:
            rows = [
                tuple(row)
                for row in connection.execute(
                    sa.text(
                        f"SELECT {_COLUMNS} FROM benchmark_campaign_work WHERE campaign_id = :c"
                    ),
                    {"c": campaign_id},
                )
            ]
            campaign = tuple(
                connection.execute(
                    sa.text(
                        "SELECT campaign_id, policy_sha256, suite_sha256, work_count, created_at,"
                        " updated_at FROM benchmark_campaigns"
                    )
                ).one()
            )
        assert len(rows) == ITEMS
        return elapsed, rows, campaign
    finally:
        db.dispose()


def _bare_sqlite(path: Path, rows: list[tuple[Any, ...]], campaign: tuple[Any, ...]) -> float:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA foreign_keys = ON")
        started = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "INSERT INTO benchmark_campaigns (campaign_id, policy_sha256, suite_sha256,"
            " work_count, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            campaign,
        )
        connection.executemany(
            f"INSERT INTO benchmark_campaign_work ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", rows
        )
        connection.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        connection.close()


def _bare_postgresql(url: str, rows: list[tuple[Any, ...]], campaign: tuple[Any, ...]) -> float:
    import psycopg

    with psycopg.connect(psycopg_dsn(url)) as connection:
        started = time.perf_counter()
        connection.execute(
            "INSERT INTO benchmark_campaigns (campaign_id, policy_sha256, suite_sha256,"
            " work_count, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s)",
            campaign,
        )
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO benchmark_campaign_work ({_COLUMNS})"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                rows,
            )
        connection.commit()
        return time.perf_counter() - started


def _row(backend: str, ours: float, bare: float) -> Figure:
    return figure(
        f"create() of {ITEMS:,} items ({backend})",
        "s",
        ours,
        bare,
        "bare executemany, same rows",
        "<= 2x",
        "includes deriving the work ids (sha256 each) and storing policy, suite, report state",
    )


def figures() -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-create-") as workdir:
        root = Path(workdir)
        ours, stored, campaign = _ours(f"sqlite:///{root / 'ours.sqlite'}")
        reference = Database(f"sqlite:///{root / 'bare.sqlite'}")
        reference.upgrade()
        reference.dispose()
        bare = _bare_sqlite(root / "bare.sqlite", stored, campaign)
        rows.append(_row("SQLite", ours, bare))
    server = postgres_server()
    if server is None:
        rows.append(
            skipped(
                f"create() of {ITEMS:,} items (PostgreSQL)",
                "s",
                "bare executemany, same rows",
                "<= 2x",
                "no PostgreSQL",
            )
        )
        return rows
    with postgres_database(server) as url:
        ours, stored, campaign = _ours(url)
    with postgres_database(server) as url:
        reference = Database(url)
        reference.upgrade()
        reference.dispose()
        bare = _bare_postgresql(url, stored, campaign)
    rows.append(_row("PostgreSQL", ours, bare))
    return rows


def main() -> int:
    from run_all import render

    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
