#!/usr/bin/env python3
"""Campaign reads at 100,000 items: status(), health() and the integrity audit verify().

Two campaigns of ``--items`` items each (4 locales) on each backend:

- *part way* (60 % succeeded, 5 % failed under four error codes, 2 % waiting
  to retry, 0.5 % leased, the rest pending): ``status()`` and ``health()``;
- *finished*, its report stored: ``verify()`` (every result re-verified): first
  in a fresh process (a child: policy and suite parsed, the plan's work ids
  derived, the report rebuilt by the report builder), then in a fresh service
  of this process (what is content-addressed, the parsed policy and suite and
  the plan derived from them, is kept per process; the report is rebuilt), and
  again in the same service (a report already rebuilt and matched for the same
  content is not rebuilt again).

References, measured in the same run on the same database:

- ``status()`` and ``health()``: the very statements the call ran (captured
  from the engine), replayed on the bare driver (sqlite3 / psycopg) with the
  same parameters, in one transaction. Goals: status <= 2x that and < 50 ms;
  health < 100 ms.
- ``verify()``: a bare fetch of every result row of the campaign plus the
  sha256 of each result text. Goal <= 2x.

``BENCH_READS_ONLY=verify`` measures only the audit (set-up is the same).

Set-up writes results with plain SQL (each a valid, sealed result for its own
item) and runs ``VACUUM ANALYZE`` on PostgreSQL, as autovacuum would.
Medians of ``--repeat`` warm calls (``--verify-repeat`` for the audit).

    .venv/bin/python benchmarks/bench_reads.py [--items 100000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from benchledger.domain.integrity import result_seal  # noqa: E402
from benchledger.services.campaigns import CampaignService  # noqa: E402

CODES = ("example.timeout", "example.rate_limited", "example.locale_unsupported", "bench.x")


def _medians(
    ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    """Median wall times (ms) of ``repeat`` warm calls of each, taken in turns.

    Alternating keeps a shared machine's slow moments from landing on one side.
    """
    ours()
    theirs()
    timings: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for call, seen in ((ours, timings[0]), (theirs, timings[1])):
            started = time.perf_counter()
            call()
            seen.append(time.perf_counter() - started)
    return statistics.median(timings[0]) * 1000, statistics.median(timings[1]) * 1000


def _items(connection: sa.Connection, campaign_id: str) -> list[Any]:
    return connection.execute(
        sa.text(
            "SELECT work_id, target_locale, suite_case_key FROM benchmark_campaign_work"
            " WHERE campaign_id = :c ORDER BY target_locale, suite_case_key"
        ),
        {"c": campaign_id},
    ).all()


def _result_row(row: Any, suite_sha256: str, at: float, score: float) -> dict[str, Any]:
    text = canonical_json(
        {
            "target_locale": row.target_locale,
            "suite": {"case_key": row.suite_case_key, "suite_sha256": suite_sha256},
            "score": score,
        }
    )
    digest = sha256_text(text)
    return {
        "s": "succeeded",
        "a": 1,
        "rj": text,
        "rh": digest,
        "seal": result_seal(row.work_id, 1, 3, digest),
        "u": at,
        "n": at,
        "e": None,
        "o": None,
        "t": None,
        "x": None,
        "w": row.work_id,
    }


_UPDATE = sa.text(
    # Set up without an attempt history: history_from says it begins after these attempts.
    "UPDATE benchmark_campaign_work SET status = :s, attempts = :a, history_from = :a,"
    " result_json = :rj,"
    " result_sha256 = :rh, result_seal = :seal, updated_at = :u, next_attempt_at = :n,"
    " last_error_code = :e, lease_owner = :o, lease_token = :t, lease_expires_at = :x"
    " WHERE work_id = :w"
)


def _empty(status: str, work_id: str, attempts: int, **values: Any) -> dict[str, Any]:
    row = {"s": status, "a": attempts, "rj": None, "rh": None, "seal": None, "e": None}
    row.update({"o": None, "t": None, "x": None, "w": work_id}, **values)
    return row


def seed(url: str, items: int) -> tuple[str, str]:
    """A part-way campaign and a finished one (report stored); their ids."""
    db = Database(url)
    db.upgrade()
    service = CampaignService(db)
    now = time.time()
    part_policy, part_suite = plan(items)
    part = service.create(part_policy, part_suite)
    done_policy, done_suite = plan(items)
    done = service.create(done_policy, done_suite)
    with db.engine.begin() as connection:
        rows = _items(connection, part)
        n = len(rows)
        succeeded, failed = int(n * 0.60), int(n * 0.05)
        retry, leased = int(n * 0.02), int(n * 0.005)
        updates: list[dict[str, Any]] = []
        for index, row in enumerate(rows[:succeeded]):
            at = now - 3600 + 3600 * index / max(1, succeeded)
            updates.append(_result_row(row, part_suite.sha256, at, 0.5))
        start = succeeded
        for index, row in enumerate(rows[start : start + failed]):
            updates.append(
                _empty("failed", row.work_id, 3, u=now - 60, n=now - 60, e=CODES[index % 4])
            )
        start += failed
        for index, row in enumerate(rows[start : start + retry]):
            updates.append(_empty("retry_wait", row.work_id, 1, u=now, n=now + index, e=CODES[0]))
        start += retry
        for index, row in enumerate(rows[start : start + leased]):
            updates.append(
                _empty(
                    "leased",
                    row.work_id,
                    1,
                    u=now,
                    n=now,
                    o=f"worker-{index % 16}",
                    t=f"token-{index}",
                    x=now + 300 + index,
                )
            )
        connection.execute(_UPDATE, updates)
        later = time.time()  # after create: a row is never updated before it was created
        finished = [
            _result_row(row, done_suite.sha256, later, (index % 100) / 100)
            for index, row in enumerate(_items(connection, done))
        ]
        connection.execute(_UPDATE, finished)
    service.summarize(done)  # builds and stores the report (verifies every result once)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        if db.dialect_name == "postgresql":
            connection.exec_driver_sql("VACUUM ANALYZE")
        else:  # fold the set-up's large WAL into the database file, as a checkpoint would
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return part, done


@contextmanager
def captured(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement (SQL text and parameters, as sent to the driver) run meanwhile."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def replay(url: str, statements: list[tuple[str, Any]]) -> Callable[[], None]:
    """The statements on the bare driver, in one read transaction, every row fetched."""
    work = [(s, p) for s, p in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(sa.make_url(url).database or "", isolation_level=None)

        def run_sqlite() -> None:
            connection.execute("BEGIN")
            for statement, parameters in work:
                connection.execute(statement, parameters).fetchall()
            connection.execute("ROLLBACK")

        return run_sqlite
    import psycopg

    pg = psycopg.connect(psycopg_dsn(url))
    pg.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    def run_pg() -> None:
        with pg.cursor() as cursor:
            for statement, parameters in work:
                cursor.execute(statement, parameters)
                cursor.fetchall()
        pg.rollback()

    return run_pg


def fetch_and_hash(url: str, campaign_id: str) -> Callable[[], None]:
    """The audit's reference: every result row of the campaign fetched, each text hashed."""
    query = "SELECT result_json FROM benchmark_campaign_work WHERE campaign_id = {p}"
    sha256 = hashlib.sha256
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(sa.make_url(url).database or "")

        def run_sqlite() -> None:
            for (text,) in connection.execute(query.format(p="?"), (campaign_id,)):
                sha256(text.encode()).hexdigest()

        return run_sqlite
    import psycopg

    pg = psycopg.connect(psycopg_dsn(url), autocommit=True)

    def run_pg() -> None:
        with pg.cursor() as cursor:
            cursor.execute(query.format(p="%s"), (campaign_id,))
            for (text,) in cursor:
                sha256(text.encode()).hexdigest()

    return run_pg


_COLD = """
import json, sys, time
sys.path.insert(0, {here!r})
from bench_reads import fetch_and_hash
url, campaign_id = {url!r}, {campaign_id!r}
reference = fetch_and_hash(url, campaign_id)
started = time.perf_counter()
reference()
reference_ms = (time.perf_counter() - started) * 1000
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
db = Database(url)
started = time.perf_counter()
report = CampaignService(db).verify(campaign_id)
ours_ms = (time.perf_counter() - started) * 1000
assert report.ok, report.as_payload()
print(json.dumps([ours_ms, reference_ms]))
"""


def cold_verify(url: str, campaign_id: str) -> tuple[float, float]:
    """verify() as the first audit of a fresh process, and the reference in that process."""
    code = _COLD.format(here=str(HERE), url=url, campaign_id=campaign_id)
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=600
    )
    ours, theirs = json.loads(done.stdout.strip().splitlines()[-1])
    return float(ours), float(theirs)


def measure(url: str, backend: str, items: int, repeat: int, verify_repeat: int) -> list[Figure]:
    started = time.perf_counter()
    part, done = seed(url, items)
    setup = time.perf_counter() - started
    db = Database(url)
    service = CampaignService(db)
    size = f"{items:,} items"
    rows: list[Figure] = []
    only_verify = os.environ.get("BENCH_READS_ONLY") == "verify"
    try:
        if not only_verify:
            rows += _polled(url, backend, service, db, part, size, repeat)
        rows += _audits(url, backend, service, db, done, size, verify_repeat, setup)
    finally:
        db.dispose()
    return rows


def _polled(
    url: str,
    backend: str,
    service: CampaignService,
    db: Database,
    part: str,
    size: str,
    repeat: int,
) -> list[Figure]:
    """status() and health() of the part-way campaign."""
    rows: list[Figure] = []
    status = service.status(part)
    assert status.counts["succeeded"] > 0 and status.error_counts
    with captured(db.engine) as statements:
        service.status(part)
    status_ms, status_ref = _medians(lambda: service.status(part), replay(url, statements), repeat)
    rows.append(
        figure(
            f"{backend} status(), part-way campaign",
            "ms",
            status_ms,
            status_ref,
            f"its {len(statements)} statements on the bare driver",
            "<= 2x and < 50 ms",
            f"{size}; median of {repeat}",
        )
    )
    health = service.health(part)
    assert health.status == "blocked" and health.counts == tuple(sorted(status.counts.items()))
    with captured(db.engine) as statements:
        service.health(part)
    health_ms, health_ref = _medians(lambda: service.health(part), replay(url, statements), repeat)
    rows.append(
        figure(
            f"{backend} health(), part-way campaign",
            "ms",
            health_ms,
            health_ref,
            f"its {len(statements)} statements on the bare driver",
            "< 100 ms",
            f"{size}; median of {repeat}",
        )
    )
    return rows


def _audits(
    url: str,
    backend: str,
    service: CampaignService,
    db: Database,
    done: str,
    size: str,
    verify_repeat: int,
    setup: float,
) -> list[Figure]:
    """verify() of the finished campaign: a fresh process, a fresh service, the same one."""
    rows: list[Figure] = []
    reference_name = "bare fetch + sha256 of every result row"
    cold_ms, cold_ref = cold_verify(url, done)
    report = service.verify(done)
    assert report.ok, report.as_payload()
    note = f"{size} ({report.rows_checked:,} rows checked)"
    rows.append(
        figure(
            f"{backend} verify(), first audit in a process",
            "ms",
            cold_ms,
            cold_ref,
            f"{reference_name} (in that process)",
            "<= 2x",
            f"{note}; a fresh process: plan parsed and derived, report rebuilt;"
            f" set-up {setup:.0f} s",
        )
    )
    reference = fetch_and_hash(url, done)
    note += f"; median of {verify_repeat}"
    # A fresh service each time: the report rebuilt by the builder.
    fresh_ms, fresh_ref = _medians(
        lambda: CampaignService(db).verify(done), reference, verify_repeat
    )
    rows.append(
        figure(
            f"{backend} verify(), a fresh service",
            "ms",
            fresh_ms,
            fresh_ref,
            reference_name,
            "<= 2x",
            f"{note}; report rebuilt; policy, suite and plan kept per process (content-addressed)",
        )
    )
    again_ms, again_ref = _medians(lambda: service.verify(done), reference, verify_repeat)
    rows.append(
        figure(
            f"{backend} verify(), again in the same process",
            "ms",
            again_ms,
            again_ref,
            reference_name,
            "<= 2x",
            f"{note}; the matched report not rebuilt (same content)",
        )
    )
    return rows


def figures(items: int = 100_000, repeat: int = 15, verify_repeat: int = 1) -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'reads.db'}"
        rows += measure(url, "SQLite", items, repeat, verify_repeat)
    server = postgres_server()
    if server is None:
        for name, goal in (
            ("status()", "<= 2x and < 50 ms"),
            ("health()", "< 100 ms"),
            ("verify()", "<= 2x"),
        ):
            rows.append(
                skipped(
                    f"PostgreSQL {name}",
                    "ms",
                    "bare driver",
                    goal,
                    "no PostgreSQL server (BENCHLEDGER_TEST_PG_URL)",
                )
            )
    else:
        with postgres_database(server) as url:
            rows += measure(url, "PostgreSQL", items, repeat, verify_repeat)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--verify-repeat", type=int, default=1)
    args = parser.parse_args()
    from run_all import render

    print(render(figures(args.items, args.repeat, args.verify_repeat)))


if __name__ == "__main__":
    main()
