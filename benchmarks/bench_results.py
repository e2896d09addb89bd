#!/usr/bin/env python3
"""Results out of the ledger: export, compare, and what the attempt history costs a cycle.

Set-up (not timed): campaigns created by ``CampaignService.create``, then every
item marked succeeded in bulk with plain SQL (an ``executemany`` on SQLite, a
``COPY`` and one ``UPDATE ... FROM`` on PostgreSQL), each with a valid, sealed
result of a seeded random score for its own item, and one ``succeeded`` row in
the attempt history per item (one ``INSERT ... SELECT``); then a WAL
checkpoint (SQLite) or ``VACUUM ANALYZE`` (PostgreSQL). Figures:

1. **Export** of a 100,000-item campaign, ``write_items(iter_results(id), out,
   "jsonl" | "parquet")``, against a bare reference on the same rows in the same
   run: one streamed ``SELECT`` (sqlite3; a psycopg server-side cursor) of the
   same item columns with the item's attempt history aggregated in the same
   statement (counts per outcome, first claim, last finish), in the same order,
   ``json.loads`` of each result, and a write of the same fields (``json.dumps``
   per line; for Parquet, a pyarrow table of the same typed columns per 10,000
   rows). The JSON Lines files are checked to be byte-identical. Alternating
   rounds, medians. Peak memory: the growth of the peak resident size during the
   export (``VmHWM``, reset just before it), each in a child process of its
   own, at 100k and at 20k items (flat: it does not grow with the campaign),
   the bare loop's at 100k in the note.
2. **Compare** of two 100,000-item campaigns over one suite (SQLite):
   ``CampaignService.compare`` (10,000 bootstrap resamples) against the bare
   read and pairing of the same items (sqlite3, ``json.loads``) plus the same
   statistics from scipy (``wilcoxon``, ``binomtest``) and a numpy paired
   bootstrap of 10,000 resamples per locale (overall: stratified by locale, as
   ``compare`` has it), overall and per locale, one locale after another; the
   numbers are checked to agree. Also the breakdown: read + pair, and the
   statistics, each side.
3. **The claim -> complete cycle with the attempt history** against the same
   cycle without it: the same in-process loop (``claim``, ``complete``), three
   rounds, each on a fresh campaign per side, the sides taking turns every 10
   cycles within the round (a commit's fsync varies by several times within
   seconds); the mean cycle of each side's round, medians over the rounds.
   "Without" replaces ``benchledger.repositories.campaigns.attempts.RECORD_ATTEMPT``
   (the name ``record_attempt`` calls) by a no-op for its turns, and on
   PostgreSQL ``complete_recorded`` (the completion and its history row as one
   statement) by the plain completion ``UPDATE``, so the one difference is the
   history's row (checked: the "with" campaigns have a history row per cycle,
   the "without" ones none). SQLite and PostgreSQL.

    .venv/bin/python benchmarks/bench_results.py [--items 100000] [--small 20000]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _campaigns import plan, result  # noqa: E402
from _figures import (  # noqa: E402
    Figure,
    figure,
    postgres_database,
    postgres_server,
    psycopg_dsn,
    skipped,
)

from benchledger.db import Database  # noqa: E402
from benchledger.domain.attempts import AttemptOutcome  # noqa: E402
from benchledger.domain.canonical import canonical_json, sha256_text  # noqa: E402
from benchledger.domain.integrity import result_seal  # noqa: E402
from benchledger.services.campaigns import CampaignService  # noqa: E402

ITEMS = 100_000
SMALL = 20_000
EXPORT_ROUNDS = 2
CYCLE_ROUNDS = 3
CYCLES = 200  # per round and side
BLOCK = 10  # cycles of one side before the other takes its turn
CYCLE_ITEMS = 400  # per fresh campaign
RESAMPLES = 10_000
PASS_SCORE = 0.5
BATCH_ROWS = 10_000  # the reference's rows per Parquet write, as benchledger's

_OUTCOMES = tuple(outcome.value for outcome in AttemptOutcome)


# -- set-up -----------------------------------------------------------------------------


def _campaign(db: Database, items: int, salt: int) -> tuple[str, str]:
    """A campaign of ``items`` items, all succeeded (seeded scores), one attempt each."""
    service = CampaignService(db)
    policy, suite = plan(items)
    campaign_id = service.create(policy, suite)
    rng = random.Random(salt)
    now = time.time()
    with db.engine.begin() as connection:
        items_of = connection.execute(
            sa.text(
                "SELECT work_id, target_locale, suite_case_key, max_attempts"
                " FROM benchmark_campaign_work WHERE campaign_id = :c"
                " ORDER BY target_locale, suite_case_key"
            ),
            {"c": campaign_id},
        ).all()
        rows = []
        for work_id, locale, case_key, max_attempts in items_of:
            text = canonical_json(
                {
                    "target_locale": locale,
                    "suite": {"case_key": case_key, "suite_sha256": suite.sha256},
                    "score": round(rng.random(), 4),
                }
            )
            digest = sha256_text(text)
            rows.append((work_id, text, digest, result_seal(work_id, 1, max_attempts, digest)))
        if db.dialect_name == "postgresql":
            raw = connection.connection.driver_connection
            with raw.cursor() as cursor:  # type: ignore[union-attr]
                cursor.execute(
                    "CREATE TEMP TABLE bench_results (work_id text PRIMARY KEY, rj text,"
                    " rh text, seal text) ON COMMIT DROP"
                )
                with cursor.copy("COPY bench_results FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
                cursor.execute(
                    "UPDATE benchmark_campaign_work AS w SET status = 'succeeded',"
                    " attempts = 1, result_json = t.rj, result_sha256 = t.rh,"
                    " result_seal = t.seal, updated_at = %s, next_attempt_at = %s"
                    " FROM bench_results AS t WHERE w.work_id = t.work_id",
                    (now, now),
                )
        else:
            connection.execute(
                sa.text(
                    "UPDATE benchmark_campaign_work SET status = 'succeeded', attempts = 1,"
                    " result_json = :rj, result_sha256 = :rh, result_seal = :seal,"
                    " updated_at = :u, next_attempt_at = :u WHERE work_id = :w"
                ),
                [{"w": w, "rj": rj, "rh": rh, "seal": seal, "u": now} for w, rj, rh, seal in rows],
            )
        connection.execute(
            sa.text(
                "INSERT INTO benchmark_campaign_attempts (campaign_id, work_id, attempt,"
                " worker_id, claimed_at, finished_at, outcome, error_code, duration_seconds)"
                " SELECT campaign_id, work_id, 1, 'bench-setup', :t0, :t1, 'succeeded', NULL,"
                " 0.25 FROM benchmark_campaign_work WHERE campaign_id = :c"
            ),
            {"t0": now - 1.0, "t1": now, "c": campaign_id},
        )
    return campaign_id, suite.sha256


def _settle(db: Database) -> None:
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        if db.dialect_name == "postgresql":
            connection.exec_driver_sql("VACUUM ANALYZE")
        else:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


# -- 1. export ----------------------------------------------------------------------------


def _bare_sql(dialect: str) -> str:
    """The reference's one statement: the items and their history aggregated, in order."""
    counts = ", ".join(
        f"SUM(CASE WHEN outcome = '{name}' THEN 1 ELSE 0 END) AS n_{name}" for name in _OUTCOMES
    )
    columns = ", ".join(f"COALESCE(h.n_{name}, 0)" for name in _OUTCOMES)
    collate = ' COLLATE "C"' if dialect == "postgresql" else ""
    mark = "%s" if dialect == "postgresql" else "?"
    return (
        "SELECT w.work_id, w.target_locale, w.suite_case_key, w.status, w.attempts,"
        f" w.last_error_code, w.result_json, h.first_at, h.last_at, {columns}"
        " FROM benchmark_campaign_work AS w LEFT JOIN ("
        f"SELECT work_id, MIN(claimed_at) AS first_at, MAX(finished_at) AS last_at, {counts}"
        f" FROM benchmark_campaign_attempts WHERE campaign_id = {mark} GROUP BY work_id"
        f") AS h ON h.work_id = w.work_id WHERE w.campaign_id = {mark}"
        f" ORDER BY w.target_locale{collate}, w.suite_case_key{collate}"
    )


@contextmanager
def _bare_rows(url: str, campaign_id: str) -> Iterator[Iterator[tuple[Any, ...]]]:
    """The reference's rows, streamed: sqlite3, or a psycopg server-side cursor."""
    if url.startswith("sqlite"):
        connection = sqlite3.connect(sa.make_url(url).database or "")
        try:
            yield iter(connection.execute(_bare_sql("sqlite"), (campaign_id, campaign_id)))
        finally:
            connection.close()
        return
    import psycopg

    with (
        psycopg.connect(psycopg_dsn(url)) as connection,
        connection.cursor(name="bench_export") as cursor,
    ):
        cursor.itersize = 2_000
        cursor.execute(_bare_sql("postgresql"), (campaign_id, campaign_id))
        yield iter(cursor)


def _bare_records(rows: Iterator[tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
    names = [f"attempts_{name}" for name in _OUTCOMES]
    for work_id, locale, key, status, tries, code, text, first, last, *counts in rows:
        score = passed = None
        if status == "succeeded" and text is not None:
            loaded = json.loads(text)
            score = loaded.get("score")
            passed = loaded.get("passed")
            if passed is None and score is not None:
                passed = score >= PASS_SCORE
        record = {
            "locale": locale,
            "case_key": key,
            "work_id": work_id,
            "status": status,
            "attempts": tries,
            "score": score,
            "passed": passed,
            "error_code": code,
            "first_attempt_at": first,
            "last_attempt_at": last,
        }
        record.update(zip(names, counts, strict=True))
        yield record


def bare_export(url: str, campaign_id: str, fmt: str, path: Path) -> int:
    """The reference export: one streamed SELECT, json.loads, a write of the same fields."""
    written = 0
    with _bare_rows(url, campaign_id) as rows:
        records = _bare_records(rows)
        if fmt == "jsonl":
            with path.open("w", encoding="utf-8") as out:
                for record in records:
                    out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
                    out.write("\n")
                    written += 1
            return written
        import pyarrow as pa
        import pyarrow.parquet as pq

        from benchledger.analysis import arrow_schema

        schema = arrow_schema()
        with path.open("wb") as out, pq.ParquetWriter(out, schema) as writer:
            columns: dict[str, list[Any]] = {name: [] for name in schema.names}
            for record in records:
                for name in ("first_attempt_at", "last_attempt_at"):
                    value = record[name]
                    record[name] = None if value is None else round(value * 1_000_000)
                for name, value in record.items():
                    columns[name].append(value)
                written += 1
                if written % BATCH_ROWS == 0:
                    writer.write_table(pa.Table.from_pydict(columns, schema=schema))
                    columns = {name: [] for name in schema.names}
            if columns["work_id"]:
                writer.write_table(pa.Table.from_pydict(columns, schema=schema))
    return written


def our_export(service: CampaignService, campaign_id: str, fmt: str, path: Path) -> int:
    """benchledger's export: ``write_items(iter_results(id), out, fmt)``."""
    from benchledger.analysis import write_items

    mode = "w" if fmt == "jsonl" else "wb"
    encoding = "utf-8" if fmt == "jsonl" else None
    with path.open(mode, encoding=encoding) as out:
        return write_items(service.iter_results(campaign_id), out, fmt)


_STARTED = time.perf_counter()


def _log(message: str) -> None:
    print(f"   [{time.perf_counter() - _STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


_CHILD = "--memory"


def _peak_growth_mb(url: str, campaign_id: str, fmt: str, side: str) -> float:
    """Peak resident growth (MB) of one export in a fresh child process."""
    done = subprocess.run(
        [sys.executable, __file__, _CHILD, url, campaign_id, fmt, side],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` figure in kB (VmRSS: resident now; VmHWM: peak resident)."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the peak so far


def _reset_peak() -> int:
    """Reset the peak resident size to the current one (Linux ``clear_refs`` 5); that size.

    Without it ``ru_maxrss`` keeps the peak of the imports and set-up, and an export
    that stays below it would show no growth at all.
    """
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5", encoding="ascii")
    return _status_kb("VmRSS")


def _memory_child(url: str, campaign_id: str, fmt: str, side: str) -> None:
    import pyarrow.parquet  # noqa: F401  (imported before the baseline, as the export needs it)

    from benchledger.analysis import write_items

    with tempfile.TemporaryDirectory(prefix="bench-results-mem-") as workdir:
        path = Path(workdir) / f"out.{fmt}"
        db = Database(url)
        service = CampaignService(db)
        service.results(campaign_id, limit=10)  # warm: engine, first connection, compiled SQL
        with path.open("wb") as out:  # warm the writers (their modules and first allocations)
            write_items(service.results(campaign_id, limit=10).items, out, "parquet")
        with _bare_rows(url, campaign_id) as rows:
            next(rows)
        before = _reset_peak()
        if side == "ours":
            mode = "w" if fmt == "jsonl" else "wb"
            with path.open(mode, encoding="utf-8" if fmt == "jsonl" else None) as out:
                write_items(service.iter_results(campaign_id), out, fmt)
        else:
            bare_export(url, campaign_id, fmt, path)
        after = _status_kb("VmHWM")
        db.dispose()
    print(json.dumps((after - before) / 1024))


def export_figures(
    backend: str, db: Database, url: str, big: str, small: str, workdir: Path
) -> list[Figure]:
    rows: list[Figure] = []
    for fmt in ("jsonl", "parquet"):
        ours_path, bare_path = workdir / f"ours.{fmt}", workdir / f"bare.{fmt}"
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(EXPORT_ROUNDS):
            service = CampaignService(db)
            ours.append(_timed(lambda: our_export(service, big, fmt, ours_path)))  # noqa: B023
            theirs.append(_timed(lambda: bare_export(url, big, fmt, bare_path)))  # noqa: B023
        same = ""
        if fmt == "jsonl":
            digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (ours_path, bare_path)}
            same = "; files byte-identical" if len(digests) == 1 else "; FILES DIFFER"
        else:
            import pyarrow.parquet as pq

            same = (
                "; tables equal"
                if pq.read_table(ours_path).equals(pq.read_table(bare_path))
                else "; TABLES DIFFER"
            )
        rows.append(
            figure(
                f"results export, {ITEMS:,} items, {fmt} ({backend})",
                "s",
                statistics.median(ours),
                statistics.median(theirs),
                "bare SELECT + json.loads + write",
                "<= 2x",
                f"write_items(iter_results(...)); medians of {EXPORT_ROUNDS} alternating rounds"
                f"{same}",
            )
        )
        _log(f"{backend}: {fmt} export timed")
        big_mb = _peak_growth_mb(url, big, fmt, "ours")
        small_mb = _peak_growth_mb(url, small, fmt, "ours")
        bare_mb = _peak_growth_mb(url, big, fmt, "bare")
        rows.append(
            figure(
                f"results export peak memory, {fmt}, {ITEMS:,} vs {SMALL:,} items ({backend})",
                "MB",
                big_mb,
                small_mb,
                f"the same export of {SMALL:,} items",
                "flat (~1x)",
                "peak RSS growth during the export (VmHWM reset before it), a child process"
                " each;"
                f" the bare loop's at {ITEMS:,}: {bare_mb:.1f} MB",
            )
        )
    return rows


# -- 2. compare ---------------------------------------------------------------------------


def _bare_pairs(path: str, a: str, b: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(locales, score A, score B) of the items both succeeded, in (locale, key) order."""
    connection = sqlite3.connect(path)
    try:
        sql = (
            "SELECT target_locale, suite_case_key, result_json FROM benchmark_campaign_work"
            " WHERE campaign_id = ? AND status = 'succeeded'"
            " ORDER BY target_locale, suite_case_key"
        )
        left = {
            (locale, key): json.loads(text)["score"]
            for locale, key, text in connection.execute(sql, (a,))
        }
        locales, score_a, score_b = [], [], []
        for locale, key, text in connection.execute(sql, (b,)):
            score = left.get((locale, key))
            if score is not None:
                locales.append(locale)
                score_a.append(score)
                score_b.append(json.loads(text)["score"])
    finally:
        connection.close()
    return locales, np.asarray(score_a), np.asarray(score_b)


def _bootstrap_means(d: np.ndarray, seed: int = 0) -> np.ndarray:
    """``RESAMPLES`` means of ``d`` resampled with replacement (``PCG64(seed)``, afresh)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    n = d.size
    chunk = max(1, (1 << 20) // n)  # about a million indices at a time
    means = np.empty(RESAMPLES)
    for start in range(0, RESAMPLES, chunk):
        stop = min(start + chunk, RESAMPLES)
        means[start:stop] = d[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def _scipy_stats(locales: list[str], a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Overall and per locale: McNemar (binomtest), Wilcoxon, mean difference, bootstrap.

    What ``compare`` computes: each locale's bootstrap seeded afresh, the overall
    interval the bootstrap stratified by locale (resample r's mean: the locales'
    resample-r means weighted by their pair counts). One thread, locale by locale.
    """
    from scipy.stats import binomtest, wilcoxon

    names = np.asarray(locales)
    groups = {"overall": np.ones(len(locales), dtype=bool)}
    groups.update({name: names == name for name in sorted(set(locales))})
    out: dict[str, Any] = {}
    overall = np.zeros(RESAMPLES)
    for name, mask in groups.items():
        sa_, sb_ = a[mask], b[mask]
        pa_, pb_ = sa_ >= PASS_SCORE, sb_ >= PASS_SCORE
        k = int(np.count_nonzero(~pa_ & pb_))
        n = k + int(np.count_nonzero(pa_ & ~pb_))
        out[name] = {
            "pairs": int(mask.sum()),
            "mcnemar_p": binomtest(k, n, 0.5).pvalue if n else 1.0,
            "wilcoxon_p": float(wilcoxon(sb_, sa_).pvalue),
            "mean_difference": float(np.mean(sb_ - sa_)),
        }
        if name != "overall":
            means = _bootstrap_means(sb_ - sa_)
            overall += means * (mask.sum() / len(locales))
            out[name]["interval"] = tuple(np.quantile(means, [0.025, 0.975]))
    out["overall"]["interval"] = tuple(np.quantile(overall, [0.025, 0.975]))
    return out


def _our_read_and_pair(service: CampaignService, a: str, b: str) -> int:
    """The read + pairing phase of compare() alone (its own functions, no statistics)."""
    from benchledger.repositories.campaigns.results import ResultReads
    from benchledger.services.campaigns.compare import _rows, pair_items

    with service.context.db.read() as session:
        reads = ResultReads(session.connection())
        pairs, _dropped = pair_items(_rows(reads.stream(a)), _rows(reads.stream(b)), PASS_SCORE)
    return len(pairs)


def compare_figures(db: Database, a: str, b: str) -> list[Figure]:
    service = CampaignService(db)
    path = db.sqlite_path or ""
    _our_read_and_pair(service, a, b)  # warm the page cache and compiled statements
    started = time.perf_counter()
    comparison = service.compare(a, b, seed=0, resamples=RESAMPLES)
    ours_total = time.perf_counter() - started
    started = time.perf_counter()
    paired = _our_read_and_pair(service, a, b)
    ours_read = time.perf_counter() - started
    import scipy.stats  # noqa: F401  (its import is not the reference's work)

    started = time.perf_counter()
    locales, score_a, score_b = _bare_pairs(path, a, b)
    bare_read = time.perf_counter() - started
    started = time.perf_counter()
    reference = _scipy_stats(locales, score_a, score_b)
    bare_stats = time.perf_counter() - started
    assert paired == comparison.paired == len(locales) == reference["overall"]["pairs"]
    stats = comparison.comparison
    assert stats is not None
    agree = all(
        math.isclose(ours.mean_difference, reference[name]["mean_difference"], abs_tol=1e-12)
        and math.isclose(ours.mcnemar_p, reference[name]["mcnemar_p"], rel_tol=1e-9)
        and math.isclose(ours.wilcoxon.pvalue, reference[name]["wilcoxon_p"], rel_tol=1e-9)
        and math.isclose(ours.interval.low, reference[name]["interval"][0], abs_tol=1e-12)
        and math.isclose(ours.interval.high, reference[name]["interval"][1], abs_tol=1e-12)
        for name, ours in [("overall", stats.overall)]
        + [(group.locale, group.stats) for group in stats.locales]
    )
    ours_stats = ours_total - ours_read
    bare_total = bare_read + bare_stats
    groups = 1 + len(stats.locales)
    return [
        figure(
            f"compare() of two {ITEMS:,}-item campaigns (SQLite)",
            "s",
            ours_total,
            bare_total,
            "bare read + pair, scipy + numpy bootstrap",
            "< 3 s",
            f"{paired:,} pairs, {RESAMPLES:,} resamples, overall + {groups - 1} locales;"
            f" statistics agree with scipy: {'yes' if agree else 'NO'}",
        ),
        figure(
            f"compare(): read + pair of 2 x {ITEMS:,} items (SQLite)",
            "s",
            ours_read,
            bare_read,
            "bare sqlite3 SELECT + json.loads + dict join",
            "-",
            "compare()'s own stream + merge (ResultReads.stream, pair_items), timed alone",
        ),
        figure(
            f"compare(): statistics of {paired:,} pairs",
            "s",
            ours_stats,
            bare_stats,
            "scipy wilcoxon + binomtest, numpy bootstrap",
            "-",
            f"{groups - 1} locale bootstraps x {RESAMPLES:,} resamples ({paired * RESAMPLES:.1e}"
            " index draws; overall: stratified by locale); ours = compare() - read + pair,"
            " its locale bootstraps on threads, the reference's one after another",
        ),
    ]


# -- 3. the cycle with and without the attempt history ---------------------------------


class _NoHistory:
    """Stands in for ``RECORD_ATTEMPT`` in the "without" rounds: runs nothing."""

    def __call__(self, connection: Any, parameters: Any) -> None:
        return None


def _plain_completion(
    connection: Any, complete: Any, params: Any, claim: Any, duration: Any
) -> Any:
    """Stands in for ``complete_recorded`` in the "without" rounds: the UPDATE alone."""
    return complete(connection, params).first()


@contextmanager
def _history(on: bool) -> Iterator[None]:
    from benchledger.repositories.campaigns import attempts, leases

    original = attempts.RECORD_ATTEMPT
    combined = leases.complete_recorded
    if not on:
        attempts.RECORD_ATTEMPT = _NoHistory()  # type: ignore[assignment]
        leases.complete_recorded = _plain_completion  # type: ignore[assignment]
    try:
        yield
    finally:
        attempts.RECORD_ATTEMPT = original
        leases.complete_recorded = combined


def _cycles(service: CampaignService, campaign_id: str, cycles: int) -> float:
    started = time.perf_counter()
    for _ in range(cycles):
        claim = service.claim(campaign_id, "bench-worker")
        assert claim is not None
        service.complete(claim, result(claim))
    return (time.perf_counter() - started) / cycles


def cycle_figure(backend: str, url: str) -> Figure:
    db = Database(url)
    try:
        db.upgrade()
        service = CampaignService(db)
        timings: dict[bool, list[float]] = {True: [], False: []}
        recorded: dict[bool, int] = {True: 0, False: 0}
        warm = service.create(*plan(CYCLE_ITEMS))
        for on in (True, False):
            with _history(on):
                _cycles(service, warm, 20)
        for _ in range(CYCLE_ROUNDS):
            # A fresh campaign per side; the sides take turns every BLOCK cycles (the
            # first alternating), so both see the same disk and the same load.
            campaigns = {on: service.create(*plan(CYCLE_ITEMS)) for on in (False, True)}
            spent = {True: 0.0, False: 0.0}
            for block in range(CYCLES // BLOCK):
                for on in (False, True) if block % 2 == 0 else (True, False):
                    with _history(on):
                        spent[on] += _cycles(service, campaigns[on], BLOCK) * BLOCK
            with db.engine.connect() as connection:
                for on, campaign_id in campaigns.items():
                    timings[on].append(spent[on] / (CYCLES // BLOCK * BLOCK))
                    recorded[on] += int(
                        connection.execute(
                            sa.text(
                                "SELECT COUNT(*) FROM benchmark_campaign_attempts"
                                " WHERE campaign_id = :c"
                            ),
                            {"c": campaign_id},
                        ).scalar_one()
                    )
        assert recorded == {True: CYCLE_ROUNDS * CYCLES, False: 0}, recorded
        with_history = statistics.median(timings[True])
        without = statistics.median(timings[False])
        spread = ", ".join(
            f"{'with' if on else 'without'} " + "/".join(f"{t * 1000:.2f}" for t in timings[on])
            for on in (True, False)
        )
        return figure(
            f"claim -> complete with attempt history ({backend})",
            "ms/cycle",
            with_history * 1000,
            without * 1000,
            "same cycle, RECORD_ATTEMPT a no-op",
            "<= 1.15x",
            f"medians of {CYCLE_ROUNDS} rounds of {CYCLES} cycles a side, a fresh"
            f" {CYCLE_ITEMS}-item campaign each, sides taking turns every {BLOCK} cycles;"
            f" rounds (ms): {spread}; history rows checked: {CYCLES} per 'with', 0 per"
            " 'without' campaign",
        )
    finally:
        db.dispose()


# -- the module's figures ----------------------------------------------------------------


def _backend(backend: str, url: str, workdir: Path, with_compare: bool) -> list[Figure]:
    db = Database(url)
    try:
        db.upgrade()
        big, _suite = _campaign(db, ITEMS, salt=1)
        small, _ = _campaign(db, SMALL, salt=3)
        other = _campaign(db, ITEMS, salt=2)[0] if with_compare else None
        _settle(db)
        _log(f"{backend}: campaigns ready")
        rows = export_figures(backend, db, url, big, small, workdir)
        _log(f"{backend}: exports done")
        if other is not None:
            rows.extend(compare_figures(db, big, other))
            _log(f"{backend}: compare done")
    finally:
        db.dispose()
    rows.append(cycle_figure(backend, url))
    _log(f"{backend}: cycle done")
    return rows


def _skipped_postgres() -> list[Figure]:
    why = "no PostgreSQL server in this run"
    rows = [
        skipped(
            f"results export, {ITEMS:,} items, {fmt} (PostgreSQL)",
            "s",
            "bare SELECT + json.loads + write",
            "<= 2x",
            why,
        )
        for fmt in ("jsonl", "parquet")
    ]
    rows.append(
        skipped(
            "claim -> complete with attempt history (PostgreSQL)",
            "ms/cycle",
            "same cycle, RECORD_ATTEMPT a no-op",
            "<= 1.15x",
            why,
        )
    )
    return rows


def figures() -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-results-") as name:
        workdir = Path(name)
        url = f"sqlite:///{workdir / 'results.sqlite'}"
        _log("set-up")
        rows.extend(_backend("SQLite", url, workdir, with_compare=True))
        server = postgres_server()
        if server is None:
            rows.extend(_skipped_postgres())
        else:
            with postgres_database(server) as pg_url:
                rows.extend(_backend("PostgreSQL", pg_url, workdir, with_compare=False))
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_CHILD]:
        _memory_child(*argv[1:5])
        return 0
    from run_all import render

    global ITEMS, SMALL
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--small", type=int, default=SMALL)
    args = parser.parse_args(argv)
    ITEMS, SMALL = args.items, args.small
    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
