#!/usr/bin/env python3
"""Claim + complete cycle time of CampaignService at 100 / 1,000 / 5,000 items.

For each size, a campaign is created, all but the last ``--cycles`` items are
marked succeeded directly in SQL (so the claim has to get past many finished
rows, the seed's worst case), and the remaining items are claimed and
completed one by one through the service; the mean time per cycle is printed.

The reference is measured in the same run on the same kind of database: a
bare DB-API loop over a minimal job table with a partial index, doing the same
two write transactions per cycle (lease the next pending row, then mark it
done). The ratio is what to compare across machines. The seed's own store
measured 12 / 67 / 300 ms per cycle at these sizes (see DESIGN.md).

SQLite always; PostgreSQL too when ``BENCHLEDGER_TEST_PG_URL`` (or
``BENCHLEDGER_TEST_URL``) names a server (a throwaway database is created).

    .venv/bin/python benchmarks/claim_cycle.py [--sizes 100,1000,5000] [--cycles 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database, resolve_url
from benchledger.domain.campaign import CampaignPolicy, ClaimedCase, Suite, SuiteCase
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.services.campaigns import CampaignService

LOCALES = ("de-DE", "fr-FR", "ja-JP", "pt-BR")
VALID_UNTIL = 4_102_444_800.0


def _plan(items: int) -> tuple[CampaignPolicy, Suite]:
    cases = max(1, items // len(LOCALES))
    suite = Suite(
        SuiteCase(
            key=f"case-{index:05d}",
            source_id=f"bench/{index}",
            source_revision="r1",
            source_text=f"Benchmark sentence number {index}.",
            source_locale="en-US",
        )
        for index in range(cases)
    )
    policy = CampaignPolicy(
        suite_sha256=suite.sha256,
        required_locales=LOCALES,
        valid_until=VALID_UNTIL,
        candidate_provider_id="bench",
        candidate_model_id=f"model-{uuid.uuid4().hex[:8]}",
        candidate_model_version="1",
        candidate_software_version="1",
        candidate_glossary_version="1",
        candidate_policy_version="1",
    )
    return policy, suite


def _result(claim: ClaimedCase) -> dict[str, Any]:
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.5,
    }


def _fast_forward(db: Database, campaign_id: str, remaining: int) -> None:
    """Mark all but the last ``remaining`` items succeeded (benchmark setup only)."""
    text = canonical_json({"score": 0.5, "setup": True})
    with db.engine.begin() as connection:
        keep = sa.text(
            "SELECT work_id FROM benchmark_campaign_work WHERE campaign_id = :c"
            " ORDER BY target_locale DESC, suite_case_key DESC LIMIT :n"
        )
        kept = [row[0] for row in connection.execute(keep, {"c": campaign_id, "n": remaining})]
        statement = sa.text(
            "UPDATE benchmark_campaign_work SET status = 'succeeded', attempts = 1,"
            " result_json = :t, result_sha256 = :h"
            " WHERE campaign_id = :c AND NOT (work_id IN :kept)"
        ).bindparams(sa.bindparam("kept", expanding=True))
        connection.execute(
            statement, {"t": text, "h": sha256_text(text), "c": campaign_id, "kept": kept}
        )


def measure_service(db: Database, items: int, cycles: int) -> float:
    """Mean seconds per claim + complete, over the campaign's last ``cycles`` items."""
    service = CampaignService(db)
    policy, suite = _plan(items)
    campaign_id = service.create(policy, suite)
    work_count = len(policy.required_locales) * len(suite.cases)
    cycles = min(cycles, work_count)
    if work_count > cycles:
        _fast_forward(db, campaign_id, cycles)
    timings = []
    for _ in range(cycles):
        started = time.perf_counter()
        claim = service.claim(campaign_id, "bench-worker")
        assert claim is not None
        service.complete(claim, _result(claim))
        timings.append(time.perf_counter() - started)
    assert service.claim(campaign_id, "bench-worker") is None
    return statistics.mean(timings)


# -- the reference: a bare indexed loop, same transactions per cycle ---------------------------


def measure_reference_sqlite(path: Path, items: int, cycles: int) -> float:
    import sqlite3

    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, ord TEXT NOT NULL, status TEXT NOT NULL,"
        " owner TEXT, result TEXT)"
    )
    connection.execute("CREATE INDEX jobs_ready ON jobs (ord) WHERE status = 'pending'")
    connection.executemany(
        "INSERT INTO jobs VALUES (?, ?, ?, NULL, NULL)",
        (
            (uuid.uuid4().hex, f"{index:06d}", "done" if index < items - cycles else "pending")
            for index in range(items)
        ),
    )
    timings = []
    for _ in range(min(cycles, items)):
        started = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        job = connection.execute(
            "UPDATE jobs SET status = 'leased', owner = 'w' WHERE id ="
            " (SELECT id FROM jobs WHERE status = 'pending' ORDER BY ord LIMIT 1) RETURNING id"
        ).fetchone()[0]
        connection.execute("COMMIT")
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("UPDATE jobs SET status = 'done', result = '{}' WHERE id = ?", (job,))
        connection.execute("COMMIT")
        timings.append(time.perf_counter() - started)
    connection.close()
    return statistics.mean(timings)


def measure_reference_postgresql(url: str, items: int, cycles: int) -> float:
    import psycopg

    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as connection:
        connection.execute("DROP TABLE IF EXISTS jobs")
        connection.execute(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, ord TEXT NOT NULL, status TEXT NOT NULL,"
            " owner TEXT, result TEXT)"
        )
        connection.execute("CREATE INDEX jobs_ready ON jobs (ord) WHERE status = 'pending'")
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO jobs VALUES (%s, %s, %s, NULL, NULL)",
                [
                    (uuid.uuid4().hex, f"{i:06d}", "done" if i < items - cycles else "pending")
                    for i in range(items)
                ],
            )
        connection.commit()
        connection.execute("ANALYZE jobs")
        connection.commit()
        timings = []
        for _ in range(min(cycles, items)):
            started = time.perf_counter()
            row = connection.execute(
                "WITH next AS (SELECT id FROM jobs WHERE status = 'pending' ORDER BY ord"
                " LIMIT 1 FOR UPDATE SKIP LOCKED)"
                " UPDATE jobs SET status = 'leased', owner = 'w' FROM next"
                " WHERE jobs.id = next.id RETURNING jobs.id"
            ).fetchone()
            connection.commit()
            assert row is not None
            connection.execute("UPDATE jobs SET status = 'done', result = '{}' WHERE id = %s", row)
            connection.commit()
            timings.append(time.perf_counter() - started)
        connection.execute("DROP TABLE jobs")
        connection.commit()
    return statistics.mean(timings)


# -- databases ------------------------------------------------------------------------------


@contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    admin = sa.create_engine(resolve_url(server_url), isolation_level="AUTOCOMMIT")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield (
            sa.make_url(resolve_url(server_url))
            .set(database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def run(
    backend: str,
    url_for: Callable[[int], Any],
    reference: Callable[[int, int], float],
    sizes: list[int],
    cycles: int,
) -> list[tuple[str, int, float, float]]:
    rows = []
    for size in sizes:
        with url_for(size) as url:
            db = Database(url)
            try:
                db.upgrade()
                ours = measure_service(db, size, cycles)
            finally:
                db.dispose()
        ref = reference(size, cycles)
        rows.append((backend, size, ours, ref))
        print(
            f"{backend:<11} {size:>6} items  {ours * 1000:8.2f} ms/cycle"
            f"  reference {ref * 1000:7.2f} ms/cycle  ratio {ours / ref:5.2f}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.sizes.split(",")]
    print("claim + complete, mean over the campaign's last items; the seed: 12 / 67 / 300 ms")
    with tempfile.TemporaryDirectory(prefix="claim-cycle-") as workdir:
        root = Path(workdir)

        @contextmanager
        def sqlite_url(size: int) -> Iterator[str]:
            yield f"sqlite:///{root / f'ledger-{size}.sqlite'}"

        run(
            "sqlite",
            sqlite_url,
            lambda size, cycles: measure_reference_sqlite(
                root / f"ref-{size}.sqlite", size, cycles
            ),
            sizes,
            args.cycles,
        )
    server = os.environ.get("BENCHLEDGER_TEST_URL") or os.environ.get("BENCHLEDGER_TEST_PG_URL")
    if server:

        @contextmanager
        def pg_url(size: int) -> Iterator[str]:
            with postgres_database(server) as url:
                yield url

        def pg_reference(size: int, cycles: int) -> float:
            with postgres_database(server) as url:
                return measure_reference_postgresql(url, size, cycles)

        run("postgresql", pg_url, pg_reference, sizes, args.cycles)
    else:
        print("postgresql: skipped (set BENCHLEDGER_TEST_PG_URL to a server URL)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
