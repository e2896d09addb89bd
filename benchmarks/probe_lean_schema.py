"""Probe (not run by ``make bench``): what benchledger's SQL would reach on a leaner schema.

A design question, answered with a prototype: how much of the gap between a
worker's statements and the bare batched loop (``bench_batching.py``) is the
schema's? The prototype keeps what benchledger writes for each item and keeps
it fenced, and changes where it is stored:

- a fencing token per leased row (``<claim token>.<item>``), the attempt and its
  budget, the holder and the lease's end, all compared by the completion, which
  writes nothing for an entry whose lease is not live;
- the result with its sha256 and seal (the seal binds item, attempt, budget and
  digest), and one attempt-history row per completion;
- the claim in claim order (an integer ``ord`` a create would assign from the
  locale and case key), ``FOR UPDATE SKIP LOCKED``, 16 per round.

What changes: the lease state lives in a narrow table of its own with integer
keys (``lean_leases``: the claimable, the leased and a by-status index, each on
the campaign's integer key), the item row is written once at create, and the
result and the history row are inserts into append-only tables. A status
change so maintains small integer indexes, not the work row's six text ones.

Each round is one transaction, as a worker's group commit: the completion of
the last round's 16 (``json_to_recordset``, one statement with data-modifying
CTEs) and the claim of the next 16, both prepared and on generic plans. In the
same run, each in 1 and 4 processes over 10,000 items, medians of 3 rounds
(the systems in turn, a ``VACUUM`` and a ``CHECKPOINT`` before each drain):
benchledger's own statements (``bench_batching``'s loop of them), the bare
batched loop and pgqueuer. Every drain is checked exactly-once.

    scripts/with-postgres.sh .venv/bin/python benchmarks/probe_lean_schema.py

Not measured here: the reads (status counts, results pages, the audit) on such
a schema, nor a worker's Python around it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import bench_batching as batching
from _figures import postgres_database, postgres_server, psycopg_dsn

ITEMS = 10_000
ROUND = 16

SCHEMA = """
DROP TABLE IF EXISTS lean_history, lean_results, lean_leases, lean_items CASCADE;
CREATE TABLE lean_items (
    item bigint PRIMARY KEY, campaign int NOT NULL, locale text NOT NULL,
    case_key text NOT NULL, UNIQUE (campaign, locale, case_key));
CREATE TABLE lean_leases (
    item bigint PRIMARY KEY REFERENCES lean_items, campaign int NOT NULL, ord int NOT NULL,
    status smallint NOT NULL, attempts smallint NOT NULL, max_attempts smallint NOT NULL,
    next_at float8 NOT NULL, owner text, token text, expires float8);
CREATE INDEX lean_claimable ON lean_leases (campaign, ord) WHERE status IN (0, 3);
CREATE INDEX lean_leased ON lean_leases (campaign, expires) WHERE status = 1;
CREATE INDEX lean_by_status ON lean_leases (campaign, status);
CREATE TABLE lean_results (
    item bigint PRIMARY KEY REFERENCES lean_items, result_json text NOT NULL,
    result_sha256 text NOT NULL, result_seal text NOT NULL);
CREATE TABLE lean_history (
    id bigserial PRIMARY KEY, campaign int NOT NULL, item bigint NOT NULL REFERENCES lean_items,
    attempt smallint NOT NULL, owner text NOT NULL, finished_at float8 NOT NULL,
    outcome smallint NOT NULL, duration float8);
CREATE INDEX lean_history_item ON lean_history (item, id);
CREATE INDEX lean_history_finished ON lean_history (campaign, finished_at);
"""

CLAIM = """
UPDATE lean_leases l SET status = 1, attempts = l.attempts + 1, owner = %(owner)s,
    token = %(token)s || '.' || l.item, expires = %(expires)s
WHERE l.item IN (
    SELECT item FROM lean_leases
    WHERE campaign = %(campaign)s AND status IN (0, 3) AND next_at <= %(now)s
        AND attempts < max_attempts
    ORDER BY ord LIMIT 16 FOR UPDATE SKIP LOCKED)
RETURNING l.item, l.attempts, l.max_attempts, l.token, l.expires
"""

COMPLETE = """
WITH given AS (
    SELECT * FROM json_to_recordset(%(batch)s::json) AS g(
        item bigint, attempt int, max_attempts int, owner text, token text, expires float8,
        result_json text, result_sha256 text, result_seal text, duration float8)
    LIMIT %(entries)s),
done AS (
    UPDATE lean_leases l SET status = 2, owner = NULL, token = NULL, expires = NULL
    FROM given g
    WHERE l.item = g.item
        AND (l.status, l.attempts, l.max_attempts, l.owner, l.token, l.expires)
            IS NOT DISTINCT FROM (1::smallint, g.attempt::smallint, g.max_attempts::smallint,
                                  g.owner, g.token, g.expires)
        AND g.expires > %(now)s
    RETURNING l.item, l.campaign, l.attempts, g.owner, g.result_json, g.result_sha256,
        g.result_seal, g.duration),
stored AS (
    INSERT INTO lean_results SELECT item, result_json, result_sha256, result_seal FROM done),
recorded AS (
    INSERT INTO lean_history (campaign, item, attempt, owner, finished_at, outcome, duration)
    SELECT campaign, item, attempts, owner, %(now)s, 1, duration FROM done)
SELECT item FROM done
"""


def _entry(name: str, row: tuple[Any, ...]) -> dict[str, Any]:
    """What a completion sends for a claimed ``row``: its lease, result, digest and seal."""
    item, attempt, max_attempts, token, expires = row
    text = json.dumps({"item": item, "score": 0.5}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()
    seal = hashlib.sha256(f"{item}|{attempt}|{max_attempts}|{digest}".encode()).hexdigest()
    return {
        "item": item,
        "attempt": attempt,
        "max_attempts": max_attempts,
        "owner": name,
        "token": token,
        "expires": expires,
        "result_json": text,
        "result_sha256": digest,
        "result_seal": seal,
        "duration": 0.0,
    }


def _lean(dsn: str, name: str, out: Any, start: Any) -> None:
    """One process of :func:`lean_run`: rounds of complete-the-last, claim-the-next."""
    import psycopg

    with psycopg.connect(dsn) as connection:
        connection.commit()
        start.wait()
        cpu, started, done = batching._cpu(), time.time(), 0
        pending: list[dict[str, Any]] = []
        while True:
            now = time.time()
            with connection.transaction():
                connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                if pending:
                    batch = {"batch": json.dumps(pending), "entries": len(pending), "now": now}
                    done += len(connection.execute(COMPLETE, batch, prepare=True).fetchall())
                lease = {
                    "owner": name,
                    "token": secrets.token_urlsafe(32),
                    "expires": now + 60,
                    "campaign": 1,
                    "now": now,
                }
                rows = connection.execute(CLAIM, lease, prepare=True).fetchall()
            pending = [_entry(name, row) for row in rows]
            if not pending:
                break
        out.put((done, started, time.time(), batching._cpu() - cpu))


def lean_run(dsn: str, processes: int, items: int) -> tuple[float, float]:
    """(items/s, client CPU ms per item) of the prototype draining ``items`` in
    ``processes`` processes; checked exactly-once."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(SCHEMA)
        connection.execute(
            "INSERT INTO lean_items SELECT i, 1, 'l' || (i %% 4), 'case-' || lpad(i::text, 6, '0')"
            " FROM generate_series(1, %s) i",
            (items,),
        )
        connection.execute(
            "INSERT INTO lean_leases SELECT i, 1, i, 0, 0, 3, 0, NULL, NULL, NULL"
            " FROM generate_series(1, %s) i",
            (items,),
        )
        connection.execute("VACUUM ANALYZE")
    reports = batching._in_processes(
        processes, lambda i, out, start: (_lean, (dsn, f"w{i}", out, start))
    )
    done = sum(report[0] for report in reports)
    with psycopg.connect(dsn, autocommit=True) as connection:
        found = connection.execute(
            "SELECT (SELECT count(*) FROM lean_history), (SELECT count(DISTINCT item) FROM"
            " lean_history), (SELECT count(*) FROM lean_leases WHERE status = 2),"
            " (SELECT count(*) FROM lean_results)"
        ).fetchone()
    assert found == (items,) * 4 and done == items, (found, done)  # exactly once
    return done / batching._span(reports), 1000 * sum(r[3] for r in reports) / done


def main() -> int:
    server = postgres_server()
    if server is None:
        print("no PostgreSQL: run it under scripts/with-postgres.sh", file=sys.stderr)
        return 2
    with postgres_database(server) as url:
        from benchledger.db import Database

        database = Database(url)
        database.upgrade()
        database.dispose()
        dsn = psycopg_dsn(url)
        for processes in (1, 4):
            systems = {
                "lean schema": lambda _i, n=processes: lean_run(dsn, n, ITEMS),
                "benchledger's statements": lambda _i, n=processes: batching._own_statements_run(
                    url, n, ITEMS
                ),
                "bare batched loop": lambda _i, n=processes: batching._bare_pg_run(dsn, n, ITEMS),
                "pgqueuer": lambda _i, n=processes: batching._pgqueuer_run(dsn, n, ITEMS),
            }
            measured = batching._rounds(systems, settle=lambda: batching._settle(dsn))
            lean = measured["lean schema"][0]
            print(f"{processes} process(es), {ITEMS:,} items, rounds of {ROUND}:")
            for name, figures in measured.items():
                if figures is None:
                    print(f"  {name:26s} not installed (pip install -e '.[bench]')")
                    continue
                rate, cpu = figures
                print(
                    f"  {name:26s} {rate:8,.0f} items/s  client CPU {cpu:.3f} ms/item"
                    f"  (the lean schema does {lean / rate:.2f}x this)"
                )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
