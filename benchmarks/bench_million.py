"""PostgreSQL at a million items: create, claim cost from 1k to 1M, status/health, verify, bytes.

One campaign of 1,000,000 items (100,000 cases x 10 locales: ``MAX_CASES`` and
ten of ``MAX_LOCALES``' 1,000), beside campaigns of 1,000 and 100,000 items of
the same shape, in one throwaway database on the run's server.

- ``create()`` of the 1M items, against a bare ``executemany`` of exactly the
  rows it stored (read back from the first database in a streamed cursor, not
  timed) into a second empty ledger of the same schema, in one transaction
  (psycopg; the campaign row first, as ``bench_create.py`` does at 100k).
- Set-up, not timed: every item but the last few hundred of each campaign in
  claim order is made succeeded in SQL, each with a valid sealed result (the
  same canonical JSON, sha256 and seal the service writes, checked on a row)
  and one ``succeeded`` row in the attempt history, then ``VACUUM ANALYZE``.
- ``status()`` and ``health()`` of the 1M campaign (goal < 50 ms), medians of
  warm calls alternating with the reference, a bare ``SELECT status, count(*)
  ... WHERE campaign_id = %s GROUP BY status`` on psycopg.
- claim -> complete, one cycle, at 1k, 100k and 1M items: ``CampaignService``'s
  ``claim`` + ``complete`` against a bare psycopg loop replaying the very
  statements one service cycle sent (captured from the engine, per-cycle
  values replaced: time, token, the claimed item, its result), the same
  commits, on the same campaign; alternating rounds; mean ms per cycle.
  Flatness: 1M vs 1k, beside the bare loop's own growth.
- ``verify()`` of the finished 1M campaign in a child process: its peak RSS
  growth (``VmHWM``, reset just before the audit) against the same audit of the
  100k campaign (the goal: flat, bounded memory), and its time against a bare
  fetch + sha256 of every result row in the same child.
- Bytes per item on disk: ``pg_total_relation_size`` (heap, TOAST, every index)
  of the work and attempt tables over the items, as created (pending, no
  history) and finished (results and history; after the set-up's updates and a
  ``VACUUM``, then after ``VACUUM FULL``), against the rows' own bytes
  (``sum(pg_column_size(row))``).

    scripts/with-postgres.sh .venv/bin/python benchmarks/bench_million.py
"""

from __future__ import annotations

import json
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _campaigns import VALID_UNTIL, result  # noqa: E402
from _figures import (  # noqa: E402
    Figure,
    figure,
    postgres_database,
    postgres_server,
    psycopg_dsn,
    skipped,
)

from benchledger.db import Database  # noqa: E402
from benchledger.domain.campaign_plan import CampaignPolicy, Suite, SuiteCase  # noqa: E402
from benchledger.domain.canonical import canonical_json, sha256_text  # noqa: E402
from benchledger.domain.integrity import SEAL_FORMAT, result_seal  # noqa: E402
from benchledger.services.campaigns import CampaignService  # noqa: E402

LOCALES = ("de-DE", "es-ES", "fr-FR", "it-IT", "ja-JP", "ko-KR", "nl-NL", "pl-PL", "pt-BR", "zh-CN")
ITEMS = 1_000_000
SIZES = (1_000, 100_000, ITEMS)
ROUNDS = 20  # rounds of the claim cycle: each size and side in turn
CYCLES = 10  # cycles per round, size and side
WARM = 5  # cycles per side before the rounds
KEEP = WARM * 2 + 1 + ROUNDS * CYCLES * 2 + 10  # items left pending per campaign for the cycles
REPEAT = 15  # warm status()/health() calls per side
CHUNK = 20_000  # rows per executemany of the create reference
_COLUMNS = (
    "work_id, campaign_id, target_locale, suite_case_key, status, attempts, max_attempts,"
    " next_attempt_at, created_at, updated_at"
)
_NAMES = {
    "create": f"create() of {ITEMS:,} items (PostgreSQL)",
    "status": f"status() at {ITEMS:,} items (PostgreSQL)",
    "health": f"health() at {ITEMS:,} items (PostgreSQL)",
    "flat": f"PostgreSQL claim -> complete flatness, {ITEMS:,} vs 1,000 items",
    "verify_mem": f"verify() peak memory growth, {ITEMS:,} vs 100,000 items (PostgreSQL)",
    "verify": f"verify() of {ITEMS:,} items (PostgreSQL)",
    "bytes": f"bytes per item on disk, {ITEMS:,} items finished (PostgreSQL)",
}


def plan(cases: int) -> tuple[CampaignPolicy, Suite]:
    """A fresh policy (unique model id) over ``cases`` cases x the ten locales."""
    suite = Suite(
        SuiteCase(
            key=f"case-{index:06d}",
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


# -- set-up: finished items with valid sealed results and their history, in SQL ------------

_SEAL = sa.text(
    "UPDATE benchmark_campaign_work AS w SET status = 'succeeded', attempts = 1,"
    " history_from = 0, result_json = s.t, result_sha256 = s.h, leased_at = :started,"
    " updated_at = :now, result_seal = encode(sha256(convert_to("
    "  :prefix || w.work_id || ':1:' || w.max_attempts || ':' || s.h, 'UTF8')), 'hex')"
    " FROM (SELECT work_id, t, encode(sha256(convert_to(t, 'UTF8')), 'hex') AS h"
    "  FROM (SELECT work_id, :j1 || suite_case_key || :j2 || target_locale || :j3 AS t"
    "   FROM benchmark_campaign_work WHERE campaign_id = :c AND status = 'pending'"
    "   AND NOT (work_id IN (SELECT work_id FROM benchmark_campaign_work WHERE campaign_id = :c"
    "    ORDER BY target_locale DESC, suite_case_key DESC LIMIT :keep))) AS x) AS s"
    " WHERE w.work_id = s.work_id"
)
_HISTORY = sa.text(
    "INSERT INTO benchmark_campaign_attempts (campaign_id, work_id, attempt, worker_id,"
    " claimed_at, finished_at, outcome, error_code, duration_seconds)"
    " SELECT campaign_id, work_id, 1, 'bench-setup', leased_at, updated_at, 'succeeded', NULL,"
    " 0.001 FROM benchmark_campaign_work WHERE campaign_id = :c AND status = 'succeeded'"
)


def seal_results(db: Database, campaign_id: str, suite_sha256: str, keep: int = 0) -> None:
    """Make every item of the campaign but the last ``keep`` in claim order succeeded (set-up
    only, plain SQL on PostgreSQL): the result the structural verifier accepts, in the
    service's canonical JSON, its sha256 and seal computed by the server, and one
    ``succeeded`` row in the attempt history per item; checked on one row against the
    domain's own functions."""
    now = time.time()
    values = {
        "c": campaign_id,
        "keep": keep,
        "now": now,
        "started": now - 0.001,
        "prefix": SEAL_FORMAT.split("{}", 1)[0],
        # {"score":0.5,"suite":{"case_key":K,"suite_sha256":S},"target_locale":L}: sorted keys
        "j1": '{"score":0.5,"suite":{"case_key":"',
        "j2": f'","suite_sha256":"{suite_sha256}"}},"target_locale":"',
        "j3": '"}',
    }
    with db.engine.begin() as connection:
        connection.execute(_SEAL, values)
        # Set-up only: the history rows reference items just written; skip the FK triggers.
        connection.exec_driver_sql("SET LOCAL session_replication_role = replica")
        connection.execute(_HISTORY, {"c": campaign_id})
        connection.exec_driver_sql("SET LOCAL session_replication_role = origin")
        row = connection.execute(
            sa.text(
                "SELECT work_id, target_locale, suite_case_key, max_attempts, result_json,"
                " result_sha256, result_seal FROM benchmark_campaign_work"
                " WHERE campaign_id = :c AND status = 'succeeded' LIMIT 1"
            ),
            {"c": campaign_id},
        ).one()
    text = canonical_json(
        {
            "target_locale": row.target_locale,
            "suite": {"case_key": row.suite_case_key, "suite_sha256": suite_sha256},
            "score": 0.5,
        }
    )
    assert row.result_json == text, (row.result_json, text)
    assert row.result_sha256 == sha256_text(text)
    assert row.result_seal == result_seal(row.work_id, 1, row.max_attempts, row.result_sha256)


def vacuum(db: Database, what: str = "VACUUM ANALYZE") -> None:
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql(
            f"{what} benchmark_campaign_work, benchmark_campaign_attempts, benchmark_campaigns"
        )


# -- create ----------------------------------------------------------------------------------


def _bare_create(source: str, target: str, campaign_id: str) -> float:
    """Seconds for the bare reference: the campaign row, then every work row create() stored,
    ``executemany`` in chunks, one transaction; reading the rows is not timed."""
    import psycopg

    elapsed = 0.0
    with psycopg.connect(psycopg_dsn(source)) as reader, psycopg.connect(target) as writer:
        campaign = reader.execute(
            "SELECT campaign_id, policy_sha256, suite_sha256, work_count, created_at,"
            " updated_at FROM benchmark_campaigns WHERE campaign_id = %s",
            (campaign_id,),
        ).fetchone()
        started = time.perf_counter()
        writer.execute(
            "INSERT INTO benchmark_campaigns (campaign_id, policy_sha256, suite_sha256,"
            " work_count, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s)",
            campaign,
        )
        elapsed += time.perf_counter() - started
        with reader.cursor(name="stored") as rows:
            rows.itersize = CHUNK
            rows.execute(
                f"SELECT {_COLUMNS} FROM benchmark_campaign_work WHERE campaign_id = %s",
                (campaign_id,),
            )
            while chunk := rows.fetchmany(CHUNK):
                started = time.perf_counter()
                with writer.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO benchmark_campaign_work ({_COLUMNS})"
                        " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                        chunk,
                    )
                elapsed += time.perf_counter() - started
        started = time.perf_counter()
        writer.commit()
        elapsed += time.perf_counter() - started
    return elapsed


def _sizes(db: Database, items: int) -> tuple[float, float, str]:
    """(bytes per item on disk, the rows' own bytes per item, a breakdown) of the work and
    attempt tables (every campaign in them), over ``items``."""
    with db.engine.connect() as connection:
        on_disk, heap, indexes, own = connection.execute(
            sa.text(
                "SELECT sum(pg_total_relation_size(t)), sum(pg_relation_size(t)),"
                " sum(pg_indexes_size(t)),"
                " (SELECT sum(pg_column_size(w.*)) FROM benchmark_campaign_work AS w)"
                " + coalesce((SELECT sum(pg_column_size(a.*))"
                "   FROM benchmark_campaign_attempts AS a), 0)"
                " FROM unnest(ARRAY['benchmark_campaign_work',"
                "  'benchmark_campaign_attempts']::regclass[]) AS t"
            )
        ).one()
        work = connection.execute(
            sa.text("SELECT pg_total_relation_size('benchmark_campaign_work')")
        ).scalar_one()
    on_disk, heap, indexes, own, work = (float(v) for v in (on_disk, heap, indexes, own, work))
    breakdown = (
        f"heap {heap / items:.0f} B, indexes {indexes / items:.0f} B"
        f" (work table {work / items:.0f} B, attempts {(on_disk - work) / items:.0f} B)"
    )
    return float(on_disk) / items, float(own) / items, breakdown


# -- status and health -----------------------------------------------------------------------


def _medians(ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int) -> tuple[float, ...]:
    """Median and slowest wall time (ms) of ``repeat`` warm calls of each, in turns."""
    ours()
    theirs()
    seen: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for call, times in ((ours, seen[0]), (theirs, seen[1])):
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(seen[0]), statistics.median(seen[1]), max(seen[0])


def _count_by_status(url: str, campaign_id: str) -> Callable[[], Any]:
    import psycopg

    connection = psycopg.connect(psycopg_dsn(url), autocommit=True)

    def run() -> Any:
        return connection.execute(
            "SELECT status, count(*) FROM benchmark_campaign_work WHERE campaign_id = %s"
            " GROUP BY status",
            (campaign_id,),
        ).fetchall()

    return run


# -- the claim -> complete cycle -------------------------------------------------------------


def _service_cycles(service: CampaignService, campaign_id: str, cycles: int) -> float:
    started = time.perf_counter()
    for _ in range(cycles):
        claim = service.claim(campaign_id, "bench-worker")
        assert claim is not None
        service.complete(claim, result(claim))
    return (time.perf_counter() - started) / cycles


class _Replay:
    """A bare psycopg loop of the statements one service cycle sent, with its commits."""

    def __init__(
        self, url: str, db: Database, service: CampaignService, campaign_id: str, suite: str
    ) -> None:
        import psycopg
        from psycopg.rows import dict_row

        sent: list[tuple[str, Any]] = []

        def record(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            sent.append((statement, parameters))

        def committed(_connection: Any) -> None:
            sent.append(("COMMIT", None))

        sa.event.listen(db.engine, "before_cursor_execute", record)
        sa.event.listen(db.engine, "commit", committed)
        try:
            _service_cycles(service, campaign_id, 1)
        finally:
            sa.event.remove(db.engine, "before_cursor_execute", record)
            sa.event.remove(db.engine, "commit", committed)
        self.steps = sent
        assert [s for s, _ in sent if s != "COMMIT"], "no statement captured"
        assert any("next_claimable" in s for s, _ in sent), [s[:60] for s, _ in sent]
        self.connection = psycopg.connect(psycopg_dsn(url), row_factory=dict_row)
        self.campaign_id = campaign_id
        self.suite = suite

    def cycles(self, cycles: int) -> float:
        connection = self.connection
        started = time.perf_counter()
        for _ in range(cycles):
            now = time.time()
            token = secrets.token_urlsafe(32)
            expires = now + 300
            claimed: dict[str, Any] | None = None
            values: dict[str, Any] = {}
            for statement, captured in self.steps:
                if statement == "COMMIT":
                    connection.commit()
                    continue
                parameters = dict(captured)
                if "next_claimable" in statement:  # the claim
                    parameters.update(
                        cid=self.campaign_id,
                        now=now,
                        owner="bench-bare",
                        token=token,
                        expires_at=expires,
                    )
                    rows = connection.execute(statement, parameters).fetchall()
                    claimed = next(r for r in rows if r["status"] == "leased" and not r["expired"])
                    attempt = claimed["attempts"]
                    text = canonical_json(
                        {
                            "target_locale": claimed["target_locale"],
                            "suite": {
                                "case_key": claimed["suite_case_key"],
                                "suite_sha256": self.suite,
                            },
                            "score": 0.5,
                        }
                    )
                    digest = sha256_text(text)
                    done = time.time()
                    values = {
                        "c_work_id": claimed["work_id"],
                        "c_campaign_id": self.campaign_id,
                        "c_locale": claimed["target_locale"],
                        "c_case": claimed["suite_case_key"],
                        "c_attempt": attempt,
                        "c_max_attempts": claimed["max_attempts"],
                        "c_owner": "bench-bare",
                        "c_token": claimed.get("lease_token") or token,
                        "c_expires_at": expires,
                        "now": done,
                        "result_json_": text,
                        "result_sha256_": digest,
                        "result_seal_": result_seal(
                            claimed["work_id"], attempt, claimed["max_attempts"], digest
                        ),
                        "a_attempt": attempt,
                        "a_worker": "bench-bare",
                        "cid": self.campaign_id,
                        "threshold": done - 1.0,
                    }
                    continue
                parameters.update({k: v for k, v in values.items() if k in parameters})
                outcome = connection.execute(statement, parameters)
                if "WITH done AS" in statement:
                    assert outcome.fetchone() is not None, "the bare completion matched nothing"
            assert claimed is not None
        return (time.perf_counter() - started) / cycles


def _cycles(
    url: str, db: Database, campaigns: dict[int, tuple[str, str]]
) -> dict[int, tuple[float, float]]:
    """(benchledger, bare) mean seconds per cycle at each size: in every round each size in
    turn, each side in turn on its campaign, so the machine's drift is spread over them all."""
    service = CampaignService(db)
    replays = {}
    for size, (campaign_id, suite) in campaigns.items():
        _service_cycles(service, campaign_id, WARM)  # warm: compiled statements, cached plan
        replays[size] = _Replay(url, db, service, campaign_id, suite)  # one more cycle
        replays[size].cycles(WARM)
    seen: dict[int, tuple[list[float], list[float]]] = {size: ([], []) for size in campaigns}
    for _ in range(ROUNDS):
        for size, (campaign_id, _suite) in campaigns.items():
            seen[size][0].append(_service_cycles(service, campaign_id, CYCLES))
            seen[size][1].append(replays[size].cycles(CYCLES))
    for size, (campaign_id, _suite) in campaigns.items():
        replays[size].connection.close()
        while (claim := service.claim(campaign_id, "bench-worker")) is not None:  # the slack
            service.complete(claim, result(claim))
    return {
        size: (statistics.mean(ours), statistics.mean(bare)) for size, (ours, bare) in seen.items()
    }


# -- verify in a child process ---------------------------------------------------------------

_VERIFY = """
import gc, hashlib, json, sys, time
from pathlib import Path
import psycopg
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService

def kb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])

url, dsn, campaign_id = sys.argv[1:4]
db = Database(url)
service = CampaignService(db)
service.status(campaign_id)  # warm: engine, first connection, the stored policy
gc.collect()
Path("/proc/self/clear_refs").write_text("5")
before = kb("VmRSS")
started = time.perf_counter()
report = service.verify(campaign_id)
ours = time.perf_counter() - started
grown = (kb("VmHWM") - before) / 1024
assert report.ok, report.as_payload()
with psycopg.connect(dsn, autocommit=True) as connection, connection.cursor() as cursor:
    started = time.perf_counter()
    cursor.execute(
        "SELECT result_json FROM benchmark_campaign_work WHERE campaign_id = %s", (campaign_id,)
    )
    for (text,) in cursor:
        hashlib.sha256(text.encode()).hexdigest()
    bare = time.perf_counter() - started
print(json.dumps([grown, ours, bare, report.rows_checked]))
db.dispose()
"""


def _verify_child(url: str, campaign_id: str) -> tuple[float, float, float, int]:
    """(peak RSS growth MB, verify s, bare fetch + sha256 s, rows checked) in a fresh child."""
    done = subprocess.run(
        [sys.executable, "-c", _VERIFY, url, psycopg_dsn(url), campaign_id],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"verify child failed:\n{done.stderr}")
    grown, ours, bare, rows = json.loads(done.stdout.strip().splitlines()[-1])
    return float(grown), float(ours), float(bare), int(rows)


# -- the figures -----------------------------------------------------------------------------


def _skipped_rows(why: str) -> list[Figure]:
    references = {
        "create": ("s", "bare executemany, same rows", "<= 2x"),
        "status": ("ms", "bare SELECT status, count(*) ... GROUP BY status", "< 50 ms"),
        "health": ("ms", "bare SELECT status, count(*) ... GROUP BY status", "< 50 ms"),
        "flat": ("x", "the bare loop's growth, same runs", "<= 1.2x"),
        "verify_mem": ("MB", "the same audit of 100,000 items", "flat (~1x)"),
        "verify": ("s", "bare fetch + sha256 of every result row", "<= 2x"),
        "bytes": ("B/item", "the rows' own bytes (pg_column_size)", "report"),
    }
    cycles = [
        skipped(
            f"PostgreSQL claim -> complete, {size:,} items",
            "ms/cycle",
            "bare psycopg, the same statements and commits",
            "<= 1.5x",
            why,
        )
        for size in SIZES
    ]
    return [skipped(_NAMES[key], *references[key], why) for key in references] + cycles


def measure(url: str) -> list[Figure]:
    timings: dict[str, float] = {}
    began = time.perf_counter()
    db = Database(url)
    db.upgrade()
    service = CampaignService(db)
    rows: list[Figure] = []

    # 1. create() of 1M items, and its bare reference in a second ledger.
    policy, suite = plan(ITEMS // len(LOCALES))
    started = time.perf_counter()
    big = service.create(policy, suite)
    created = time.perf_counter() - started
    fresh, fresh_own, fresh_parts = _sizes(db, ITEMS)
    with postgres_database(url) as target:
        reference = Database(target)
        reference.upgrade()
        reference.dispose()
        bare_created = _bare_create(url, psycopg_dsn(target), big)
    rows.append(
        figure(
            _NAMES["create"],
            "s",
            created,
            bare_created,
            "bare executemany, same rows",
            "<= 2x",
            f"{len(suite.cases):,} cases x {len(LOCALES)} locales, one transaction; includes"
            " deriving the work ids (sha256 each) and storing policy, suite, report state; the"
            f" reference's {CHUNK:,}-row executemany chunks, one transaction",
        )
    )
    timings["create"] = time.perf_counter() - began

    # Set-up: the smaller campaigns; every item but the last KEEP of each finished in SQL.
    campaigns = {ITEMS: (big, suite.sha256)}
    for size in SIZES[:-1]:
        small_policy, small_suite = plan(size // len(LOCALES))
        campaigns[size] = (service.create(small_policy, small_suite), small_suite.sha256)
    for campaign_id, suite_sha256 in campaigns.values():
        seal_results(db, campaign_id, suite_sha256, keep=KEEP)
    vacuum(db)
    timings["set-up"] = time.perf_counter() - began

    # 2. status() and health() at 1M (part-way: all but KEEP items succeeded).
    bare_count = _count_by_status(url, big)
    status = service.status(big)
    assert status.counts["succeeded"] == ITEMS - KEEP, status.counts
    status_ms, status_ref, status_max = _medians(lambda: service.status(big), bare_count, REPEAT)
    health_ms, health_ref, health_max = _medians(lambda: service.health(big), bare_count, REPEAT)
    small_status, _ref, _max = _medians(
        lambda: service.status(campaigns[SIZES[0]][0]), bare_count, 5
    )
    for key, ours, theirs, slowest in (
        ("status", status_ms, status_ref, status_max),
        ("health", health_ms, health_ref, health_max),
    ):
        rows.append(
            figure(
                _NAMES[key],
                "ms",
                ours,
                theirs,
                "bare SELECT status, count(*) ... GROUP BY status",
                "< 50 ms",
                f"{ITEMS - KEEP:,} succeeded, {KEEP} pending; median of {REPEAT} warm calls"
                f" alternating with the reference, slowest {slowest:.0f} ms; it counts the"
                " unfinished items only (the succeeded are the work count less them)"
                + (f"; status() at 1,000 items {small_status:.1f} ms" if key == "status" else ""),
            )
        )
    timings["status"] = time.perf_counter() - began

    # 3. claim -> complete at 1k, 100k, 1M.
    cycle = _cycles(url, db, {size: campaigns[size] for size in SIZES})
    for size in SIZES:
        ours, bare = cycle[size]
        rows.append(
            figure(
                f"PostgreSQL claim -> complete, {size:,} items",
                "ms/cycle",
                ours * 1000,
                bare * 1000,
                "bare psycopg, the same statements and commits",
                "<= 1.5x",
                f"{ROUNDS} rounds of {CYCLES} cycles a side, the sizes and sides taking turns;"
                f" {size - KEEP:,} items finished first (vacuumed); one process",
            )
        )
    low, high = SIZES[0], SIZES[-1]
    rows.append(
        figure(
            _NAMES["flat"],
            "x",
            cycle[high][0] / cycle[low][0],
            cycle[high][1] / cycle[low][1],
            "the bare loop's growth, same runs",
            "<= 1.2x",
            "cycle time at 1M / at 1k items, each side; the ratio divides out the machine's drift",
        )
    )
    timings["cycles"] = time.perf_counter() - began

    # 4. verify() at 1M and at 100k, each in a fresh child: memory and time.
    grown, verify_s, bare_s, checked = _verify_child(url, big)
    small_grown, small_s, _bare, _checked = _verify_child(url, campaigns[SIZES[1]][0])
    rows.append(
        figure(
            _NAMES["verify_mem"],
            "MB",
            grown,
            small_grown,
            f"the same audit of {SIZES[1]:,} items",
            "flat (~1x)",
            "peak RSS growth during verify() (VmHWM reset just before it), a fresh child process"
            f" each; every item succeeded, one history row each; {checked:,} rows checked",
        )
    )
    rows.append(
        figure(
            _NAMES["verify"],
            "s",
            verify_s,
            bare_s,
            "bare fetch + sha256 of every result row",
            "<= 2x",
            f"the first audit in a fresh process (plan parsed, work ids derived); at"
            f" {SIZES[1]:,} items {small_s:.1f} s, in the same {sum(SIZES):,}-item table (the"
            " audit's history read and stray-history count scan the whole work table)",
        )
    )
    timings["verify"] = time.perf_counter() - began

    # 5. bytes per item, finished: as the updates left it (vacuumed), then compacted.
    vacuum(db)
    left, _own, left_parts = _sizes(db, sum(SIZES))
    vacuum(db, "VACUUM FULL ANALYZE")
    compact, own, compact_parts = _sizes(db, sum(SIZES))
    rows.append(
        figure(
            _NAMES["bytes"],
            "B/item",
            compact,
            own,
            "the rows' own bytes (pg_column_size)",
            "report",
            f"work + attempt tables with every index, over all {sum(SIZES):,} items, after"
            f" VACUUM FULL: {compact_parts}; as the updates left them (VACUUM):"
            f" {left:.0f} B ({left_parts}); as created (pending, no history):"
            f" {fresh:.0f} B, own {fresh_own:.0f} B ({fresh_parts})",
        )
    )
    timings["bytes"] = time.perf_counter() - began
    db.dispose()
    rows[0]["note"] += "; module times (s, cumulative): " + ", ".join(
        f"{step} {seconds:.0f}" for step, seconds in timings.items()
    )
    return rows


def figures() -> list[Figure]:
    server = postgres_server()
    if server is None:
        return _skipped_rows("no PostgreSQL server (BENCHLEDGER_TEST_PG_URL)")
    with postgres_database(server) as url:
        return measure(url)


def main() -> int:
    from run_all import render

    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
