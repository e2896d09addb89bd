"""PostgreSQL under pressure: a campaign drained by 4 Worker processes, alone and beside stress.

Modelled on the stress phases of the public job-queue harness
hardbyte/postgresql-job-queue-benchmarking (its docs/method.md: a steady
baseline, a stress phase, a recovery). Each scenario drains a fresh campaign
of ``ITEMS`` items with 4 spawned processes, each a ``Worker`` (one lane, an
evaluator that answers at once, no report), started together; the stress is
on from the start signal until the first ``SHARE`` of the items are done
("while it lasts"), then released, and the rest are drained ("after"):

(a) alone: the reference of every other scenario, in the same run;
(b) an idle-in-transaction session holding an xid (``BEGIN; SELECT
    txid_current();``, then idle): the MVCC horizon is pinned, nothing the
    drain leaves dead can be pruned or vacuumed, nor its index entries killed;
(c) four ``REPEATABLE READ`` readers scanning the work table in loops (each
    transaction about two seconds of full ``GROUP BY status`` scans, a quarter
    second apart, staggered so that one is always open: the analytics-on-OLTP
    pattern that pins the horizon without an idle transaction);
(d) ``verify()`` of another, finished campaign of ``BIG`` items, over and
    over in a process of its own (one long read snapshot per audit);
(e) 1.5x offered load: a producer process creates campaigns of ``BATCH``
    items at 1.5 times (a)'s rate for as long as (a) took to drain its first
    ``SHARE``; the workers take the campaigns oldest first (a ``Worker`` each,
    in turn) until every produced item is done.

Measured, per scenario: items per second while the stress lasts and after
(completions counted by their time), claim latency p50/p99 (every
``claim()`` timed inside the workers, one file per process), dead tuples of
``benchmark_campaign_work`` and ``benchmark_campaign_attempts``
(``pg_stat_user_tables.n_dead_tup``, after ``pg_stat_force_next_flush()``; the
workers' own counts reach the statistics at most a second late): when the
stress ends, then after a ``VACUUM`` run right then, still under the stress
(what it cannot remove: the figure), and when the drain has ended; the work
table's share of HOT updates; and exactly-once: every item ``succeeded`` with
exactly one ``succeeded`` row in the attempt history, no other outcome, no
item missing, no work id claimed twice. Every table is vacuumed before each
scenario, so each starts with no dead tuples. The ratio of each row is "under
pressure vs alone".

Sizes: 20,000 items per drain (12,000 of them under the stress), not the
issue's 100,000 for the idle transaction: a 100,000-item drain takes about
2.5 minutes alone on a shared 2-core machine, and the module's budget is
3-5 minutes. The pinned horizon's cost grows with the items drained under it
(see the p50 of the last claims in the note).

    scripts/with-postgres.sh .venv/bin/python benchmarks/bench_pressure.py
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
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
from benchledger.services.campaigns import CampaignService  # noqa: E402

ITEMS = 20_000  # per drain
SHARE = 0.6  # the stress is on while the first 60 % of the items are drained
WORKERS = 4
BIG = 100_000  # the finished campaign (d) audits
READERS = 4
READ_SECONDS = 2.0  # one reader's transaction (REPEATABLE READ: one snapshot) lasts about this
READ_PAUSE = 0.25  # between a reader's scans
OFFERED = 1.5
BATCH = 500  # items per campaign the producer of (e) creates
LAST_CLAIMS = 1_000
TIMEOUT = 600.0  # the longest a drain may take before the module fails
HOT_TABLES = ("benchmark_campaign_work", "benchmark_campaign_attempts")
SCENARIOS = {
    "alone": "alone",
    "idle": "idle in transaction (an xid held)",
    "readers": f"{READERS} REPEATABLE READ readers scanning the work table",
    "verify": f"verify() of a {BIG:,}-item campaign",
    "offered": f"{OFFERED}x offered load",
}

# spawn: each worker is a fresh interpreter with its own connections.
_CONTEXT = multiprocessing.get_context("spawn")


class _Timed(CampaignService):
    """The service a worker runs, with every claim timed and every completion dated."""

    def __init__(self, db: Database, counter: Any) -> None:
        super().__init__(db)
        self.counter = counter
        self.claims = array("d")  # (started, seconds) of every claim, found or not
        self.done = array("d")  # when each completion returned
        self.ids: list[str] = []

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        claim = super().claim(*args, **kwargs)
        self.claims.extend((started, time.monotonic() - started))
        if claim is not None:
            self.ids.append(claim.work_id)
        return claim

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        outcome = super().complete(*args, **kwargs)
        self.done.append(time.monotonic())
        with self.counter.get_lock():
            self.counter.value += 1
        return outcome

    def save(self, path: Path) -> None:
        path.with_suffix(".claims").write_bytes(self.claims.tobytes())
        path.with_suffix(".done").write_bytes(self.done.tobytes())
        path.with_suffix(".ids").write_text("\n".join(self.ids), encoding="ascii")


_PRODUCED = sa.text(
    "SELECT campaign_id FROM benchmark_campaigns WHERE name LIKE :pattern"
    " ORDER BY created_at, campaign_id"
)


def _worker(
    url: str,
    campaign_id: str | None,
    name: str,
    outdir: str,
    counter: Any,
    produced: Any,
    start: Any,
    out: Any,
) -> None:
    """One worker process: drain ``campaign_id``, or (None) every produced campaign in turn."""
    from _evaluators import instant

    from benchledger.workers.loop import Worker

    db = Database(url)
    service = _Timed(db, counter)
    try:
        if campaign_id is not None:
            service.policy(campaign_id)  # the stored plan, loaded once per process
        else:
            with db.engine.connect() as connection:
                connection.execute(_PRODUCED, {"pattern": "offered-%"}).all()
        out.put("ready")
        start.wait()
        if campaign_id is not None:
            Worker(service, campaign_id, name, instant, finalize_report=False).run()
        else:
            finished: set[str] = set()
            while True:
                last_look = produced.is_set()  # before the listing: it sees every campaign
                with db.engine.connect() as connection:
                    listed = connection.execute(_PRODUCED, {"pattern": "offered-%"}).scalars()
                    todo = [c for c in listed if c not in finished]
                if not todo:
                    if last_look:
                        break
                    time.sleep(0.01)
                    continue
                for produced_id in todo:
                    Worker(service, produced_id, name, instant, finalize_report=False).run()
                    finished.add(produced_id)
        service.save(Path(outdir) / name)
        out.put(name)
    except BaseException as error:
        out.put(f"error: {error!r}")
        raise
    finally:
        db.dispose()


def _producer(url: str, rate: float, seconds: float, start: Any, produced: Any, out: Any) -> None:
    """Create campaigns of BATCH items at ``rate`` items/s for ``seconds``, then say so."""
    db = Database(url)
    service = CampaignService(db)
    made = 0
    try:
        service.create(*plan(BATCH), name="warm-up")  # the suite stored, the engine warm
        out.put("ready")
        start.wait()
        began = time.monotonic()
        while (now := time.monotonic()) - began < seconds:
            due = began + made * BATCH / rate
            if now < due:
                time.sleep(min(due - now, seconds - (now - began)))
                continue
            service.create(*plan(BATCH), name=f"offered-{made:05d}")
            made += 1
        out.put(("produced", made * BATCH, time.monotonic() - began))
    finally:
        produced.set()
        db.dispose()


# -- the stress ------------------------------------------------------------------------------


@contextmanager
def _idle_in_transaction(dsn: str) -> Iterator[dict[str, Any]]:
    import psycopg

    with psycopg.connect(dsn) as connection:
        xid = connection.execute("SELECT txid_current()").fetchone()
        try:
            yield {"xid": xid[0] if xid else None}
        finally:
            connection.rollback()


@contextmanager
def _readers(dsn: str) -> Iterator[dict[str, Any]]:
    import psycopg

    stop = threading.Event()
    seen: dict[str, Any] = {"scans": 0, "transactions": 0}
    lock = threading.Lock()

    def read(index: int) -> None:
        with psycopg.connect(dsn) as connection:
            connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            stop.wait(index * READ_SECONDS / READERS)  # staggered: one is always open
            while not stop.is_set():
                began = time.monotonic()
                scans = 0
                while time.monotonic() - began < READ_SECONDS and not stop.is_set():
                    connection.execute(
                        "SELECT status, count(*), max(updated_at) FROM benchmark_campaign_work"
                        " GROUP BY status"
                    ).fetchall()
                    scans += 1
                    stop.wait(READ_PAUSE)
                connection.commit()
                with lock:
                    seen["scans"] += scans
                    seen["transactions"] += 1

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(READERS)]
    for thread in threads:
        thread.start()
    try:
        yield seen
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def _verifier(url: str, campaign_id: str, stop: Any, out: Any) -> None:
    db = Database(url)
    service = CampaignService(db)
    seconds: list[float] = []
    problems = 0
    try:
        service.status(campaign_id)  # warm: imports, engine, the stored policy
        out.put("ready")
        while not stop.is_set():
            started = time.monotonic()
            report = service.verify(campaign_id)
            seconds.append(time.monotonic() - started)
            problems += not report.ok
    finally:
        out.put(("verified", seconds, problems))
        db.dispose()


@contextmanager
def _verifying(url: str, campaign_id: str) -> Iterator[dict[str, Any]]:
    stop = _CONTEXT.Event()
    out = _CONTEXT.Queue()
    process = _CONTEXT.Process(target=_verifier, args=(url, campaign_id, stop, out), daemon=True)
    process.start()
    ready = out.get(timeout=120)
    assert ready == "ready", ready
    seen: dict[str, Any] = {}
    try:
        yield seen
    finally:
        stop.set()
        _tag, seconds, problems = out.get(timeout=TIMEOUT)
        process.join(60)
        seen.update(audits=len(seconds), seconds=seconds, problems=problems)


# -- one scenario ----------------------------------------------------------------------------


def _stats(dsn: str) -> dict[str, dict[str, int]]:
    """pg_stat_user_tables of the hot tables, after this session's stats are flushed."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        flush = connection.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'pg_stat_force_next_flush'"
        ).fetchone()
        if flush and flush[0]:
            connection.execute("SELECT pg_stat_force_next_flush()")
        connection.execute("SELECT pg_stat_clear_snapshot()")
        rows = connection.execute(
            "SELECT relname, n_dead_tup, n_live_tup, n_tup_upd, n_tup_hot_upd,"
            " autovacuum_count FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (list(HOT_TABLES),),
        ).fetchall()
    names = ("dead", "live", "updates", "hot", "autovacuums")
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in rows}


def _vacuum(db: Database, *, analyze: bool = True) -> None:
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        verb = "VACUUM ANALYZE " if analyze else "VACUUM "
        connection.exec_driver_sql(verb + ", ".join(HOT_TABLES))


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Outcome:
    """What one scenario measured."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.during = self.after = 0.0  # items/s
        self.p50 = self.p99 = self.p50_after = self.p99_after = 0.0  # claim ms
        self.p50_last = 0.0  # claim ms, the last LAST_CLAIMS claims before the stress ended
        self.dead_piled: dict[str, int] = {}  # n_dead_tup when the stress ended
        self.dead_release: dict[str, int] = {}  # left by a VACUUM run then, under the stress
        self.dead_end: dict[str, int] = {}
        self.hot_share = 0.0
        self.autovacuums = 0
        self.window = 0.0  # seconds the stress lasted
        self.seconds = 0.0  # the whole drain
        self.items = 0
        self.exact = ""
        self.exact_ok = False
        self.stress: dict[str, Any] = {}


def _exactly_once(db: Database, campaigns: list[str], expected: int, ids: list[str]) -> str:
    """Every item of ``campaigns`` succeeded exactly once (history), nothing lost or doubled."""
    statement = sa.text(
        "SELECT count(*), count(*) FILTER (WHERE w.status = 'succeeded'),"
        " count(*) FILTER (WHERE coalesce(h.succeeded, 0) = 1),"
        " count(*) FILTER (WHERE coalesce(h.succeeded, 0) > 1),"
        " coalesce(sum(h.other), 0)"
        " FROM benchmark_campaign_work AS w LEFT JOIN ("
        "  SELECT work_id, count(*) FILTER (WHERE outcome = 'succeeded') AS succeeded,"
        "  count(*) FILTER (WHERE outcome <> 'succeeded') AS other"
        "  FROM benchmark_campaign_attempts WHERE campaign_id IN :ids GROUP BY work_id) AS h"
        " ON h.work_id = w.work_id WHERE w.campaign_id IN :ids"
    ).bindparams(sa.bindparam("ids", expanding=True))
    with db.engine.connect() as connection:
        items, succeeded, once, doubled, other = connection.execute(
            statement, {"ids": campaigns}
        ).one()
    claimed_twice = sum(n - 1 for n in Counter(ids).values() if n > 1)
    ok = items == expected == succeeded == once == len(ids) and not (
        doubled or other or claimed_twice
    )
    return (
        f"exactly once: {'yes' if ok else 'NO'} ({items:,} of {expected:,} items,"
        f" {succeeded:,} succeeded, {once:,} with one succeeded attempt, {doubled} with more,"
        f" {other} other attempts, {claimed_twice} claimed twice)"
    )


def run_scenario(
    url: str,
    db: Database,
    key: str,
    *,
    big: str,
    alone: Outcome | None,
) -> Outcome:
    outcome = Outcome(SCENARIOS[key])
    dsn = psycopg_dsn(url)
    service = CampaignService(db)
    campaign_id: str | None = None
    if key != "offered":
        campaign_id = service.create(*plan(ITEMS), name=f"drain-{key}")
    # Our own backends' pending statistics (the set-up's updates) reach the statistics when
    # they end: close them first, so they do not land in the middle of the scenario.
    db.engine.dispose()
    time.sleep(0.2)
    _vacuum(db)
    before = _stats(dsn)
    counter = _CONTEXT.Value("q", 0)
    produced = _CONTEXT.Event()
    start = _CONTEXT.Event()
    out = _CONTEXT.Queue()
    with tempfile.TemporaryDirectory(prefix="bench-pressure-") as outdir:
        workers = [
            _CONTEXT.Process(
                target=_worker,
                args=(url, campaign_id, f"w{i}", outdir, counter, produced, start, out),
                daemon=True,
            )
            for i in range(WORKERS)
        ]
        producer = None
        if key == "offered":
            assert alone is not None
            producer = _CONTEXT.Process(
                target=_producer,
                args=(url, OFFERED * alone.during, alone.window, start, produced, out),
                daemon=True,
            )
            workers.append(producer)
        for process in workers:
            process.start()
        try:
            for _ in workers:
                ready = out.get(timeout=120)
                assert ready == "ready", ready
            stress = _stress(key, url, dsn, big)
            with stress as seen:
                began = time.monotonic()
                start.set()
                target = int(SHARE * ITEMS)
                while not (produced.is_set() if key == "offered" else counter.value >= target):
                    time.sleep(0.01)
                    if time.monotonic() - began > TIMEOUT:
                        raise TimeoutError(f"{key}: the stress phase did not end")
                # What piled up, and what a VACUUM cannot remove while the stress holds.
                outcome.dead_piled = {t: s["dead"] for t, s in _stats(dsn).items()}
                _vacuum(db, analyze=False)
                outcome.dead_release = {t: s["dead"] for t, s in _stats(dsn).items()}
                released = time.monotonic()
            outcome.stress = dict(seen)
            reports = [out.get(timeout=TIMEOUT) for _ in workers]
        finally:
            start.set()
            produced.set()
            for process in workers:
                process.join(60)
                if process.is_alive():
                    process.terminate()
        errors = [r for r in reports if isinstance(r, str) and r.startswith("error")]
        assert not errors, errors
        for report in reports:
            if isinstance(report, tuple) and report[0] == "produced":
                outcome.stress.update(offered_items=report[1], offered_seconds=report[2])
        claims, done, ids = _collect(Path(outdir))
    time.sleep(0.5)  # the workers' backends flushed their statistics when they ended
    after = _stats(dsn)
    outcome.dead_end = {table: stats["dead"] for table, stats in after.items()}
    work = HOT_TABLES[0]
    updates = after[work]["updates"] - before[work]["updates"]
    outcome.hot_share = (after[work]["hot"] - before[work]["hot"]) / max(1, updates)
    outcome.autovacuums = sum(after[t]["autovacuums"] - before[t]["autovacuums"] for t in after)
    ended = max(done)
    outcome.window = released - began
    outcome.seconds = ended - began
    outcome.items = len(done)
    outcome.during = sum(1 for t in done if t < released) / outcome.window
    outcome.after = sum(1 for t in done if t >= released) / max(1e-9, ended - released)
    during = [s * 1000 for t, s in claims if t < released]
    later = [s * 1000 for t, s in claims if t >= released]
    outcome.p50, outcome.p99 = _percentile(during, 0.5), _percentile(during, 0.99)
    outcome.p50_after, outcome.p99_after = _percentile(later, 0.5), _percentile(later, 0.99)
    # The last claims before it ended: where a pinned horizon's dead index entries are most.
    last = sorted((t, s) for t, s in claims if t < released)[-LAST_CLAIMS:]
    outcome.p50_last = _percentile([s * 1000 for _t, s in last], 0.5)
    if key == "offered":
        with db.engine.connect() as connection:
            campaigns = list(
                connection.execute(_PRODUCED, {"pattern": "offered-%"}).scalars().all()
            )
        expected = outcome.stress.get("offered_items", 0)
    else:
        assert campaign_id is not None
        campaigns, expected = [campaign_id], ITEMS
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("ANALYZE " + ", ".join(HOT_TABLES))  # new campaigns' rows
    outcome.exact = _exactly_once(db, campaigns, expected, ids)
    outcome.exact_ok = outcome.exact.startswith("exactly once: yes")
    return outcome


def _stress(key: str, url: str, dsn: str, big: str) -> Any:
    stresses: dict[str, Callable[[], Any]] = {
        "idle": lambda: _idle_in_transaction(dsn),
        "readers": lambda: _readers(dsn),
        "verify": lambda: _verifying(url, big),
    }
    maker = stresses.get(key)
    if maker is None:

        @contextmanager
        def nothing() -> Iterator[dict[str, Any]]:
            yield {}

        return nothing()
    return maker()


def _collect(outdir: Path) -> tuple[list[tuple[float, float]], list[float], list[str]]:
    claims: list[tuple[float, float]] = []
    done: list[float] = []
    ids: list[str] = []
    for path in sorted(outdir.glob("*.claims")):
        timed = array("d")
        timed.frombytes(path.read_bytes())
        claims += list(zip(timed[0::2], timed[1::2], strict=True))
        stamps = array("d")
        stamps.frombytes(path.with_suffix(".done").read_bytes())
        done += list(stamps)
        text = path.with_suffix(".ids").read_text(encoding="ascii")
        ids += [line for line in text.splitlines() if line]
    return claims, done, ids


# -- the figures -----------------------------------------------------------------------------


def _setup(url: str) -> tuple[Database, str, float]:
    """The ledger, and the finished campaign (d) audits (valid sealed results, a history)."""
    from bench_million import seal_results

    started = time.perf_counter()
    db = Database(url)
    db.upgrade()
    policy, suite = plan(BIG)
    big = CampaignService(db).create(policy, suite, name="audited")
    seal_results(db, big, suite.sha256)
    _vacuum(db)
    return db, big, time.perf_counter() - started


def _stress_note(key: str, outcome: Outcome) -> str:
    seen = outcome.stress
    if key == "idle":
        return f"xid {seen.get('xid')} held {outcome.window:.1f} s"
    if key == "readers":
        return (
            f"{seen.get('transactions', 0)} reader transactions, {seen.get('scans', 0)} full"
            f" scans in {outcome.window:.1f} s"
        )
    if key == "verify":
        seconds = seen.get("seconds") or [0.0]
        return (
            f"{seen.get('audits', 0)} audits ({max(seconds):.1f} s the longest, problems"
            f" {seen.get('problems')}) in {outcome.window:.1f} s"
        )
    if key == "offered":
        offered = seen.get("offered_items", 0) / max(1e-9, seen.get("offered_seconds", 1.0))
        return (
            f"{seen.get('offered_items', 0):,} items offered in {BATCH}-item campaigns over"
            f" {seen.get('offered_seconds', 0):.1f} s ({offered:.0f} items/s)"
        )
    return ""


def _rows(key: str, ours: Outcome, alone: Outcome) -> list[Figure]:
    label = f"pressure, {ours.label}"
    work, attempts = HOT_TABLES
    sizes = (
        f"{ours.items:,} items drained by {WORKERS} Worker processes in {ours.seconds:.0f} s"
        f" (alone {alone.seconds:.0f} s)"
    )
    return [
        figure(
            f"{label}: items/s while it lasts",
            "items/s",
            ours.during,
            alone.during,
            "alone, the same share of the drain",
            ">= 0.8x",
            f"{_stress_note(key, ours)}; {sizes}; {ours.exact}"
            + (f"; {ITEMS:,} items, not 100,000: see the module's doc" if key == "idle" else ""),
        ),
        figure(
            f"{label}: items/s after it ends",
            "items/s",
            ours.after,
            alone.after,
            "alone, the same share of the drain",
            ">= 0.9x",
            f"the last {1 - SHARE:.0%} of the items"
            if key != "offered"
            else "the backlog left when the producer stopped",
        ),
        figure(
            f"{label}: claim p99 while it lasts",
            "ms",
            ours.p99,
            alone.p99,
            "alone, the same share of the drain",
            "< 50 ms",
            f"p50 {ours.p50:.1f} ms (alone {alone.p50:.1f}); p50 of the last {LAST_CLAIMS:,}"
            f" claims before it ended {ours.p50_last:.1f} ms (alone {alone.p50_last:.1f});"
            f" after it ends p50"
            f" {ours.p50_after:.1f} ms, p99 {ours.p99_after:.1f} ms (alone"
            f" {alone.p50_after:.1f}, {alone.p99_after:.1f})",
        ),
        figure(
            f"{label}: dead tuples a VACUUM cannot remove, work table",
            "tuples",
            float(ours.dead_release.get(work, 0)),
            float(alone.dead_release.get(work, 0)),
            "alone, at the same share",
            "report",
            f"n_dead_tup after a VACUUM of the hot tables run as the stress ended, still under"
            f" it; before that VACUUM: work {ours.dead_piled.get(work, 0):,}, attempts"
            f" {ours.dead_piled.get(attempts, 0):,} (alone {alone.dead_piled.get(work, 0):,},"
            f" {alone.dead_piled.get(attempts, 0):,}); after it, attempts"
            f" {ours.dead_release.get(attempts, 0):,}; when the drain ended: work"
            f" {ours.dead_end.get(work, 0):,}, attempts {ours.dead_end.get(attempts, 0):,}"
            f" (alone {alone.dead_end.get(work, 0):,}, {alone.dead_end.get(attempts, 0):,});"
            f" HOT updates {ours.hot_share:.0%} (alone {alone.hot_share:.0%}); autovacuum runs"
            f" {ours.autovacuums} (alone {alone.autovacuums}); every table vacuumed before",
        ),
    ]


def _skipped_rows(why: str) -> list[Figure]:
    rows = []
    for key, label in SCENARIOS.items():
        if key == "alone":
            continue
        for what, unit, goal in (
            ("items/s while it lasts", "items/s", ">= 0.8x"),
            ("items/s after it ends", "items/s", ">= 0.9x"),
            ("claim p99 while it lasts", "ms", "< 50 ms"),
            ("dead tuples a VACUUM cannot remove, work table", "tuples", "report"),
        ):
            rows.append(skipped(f"pressure, {label}: {what}", unit, "alone, same run", goal, why))
    return rows


def measure(url: str, only: tuple[str, ...] = ()) -> list[Figure]:
    began = time.perf_counter()
    db, big, setup = _setup(url)
    try:
        alone = run_scenario(url, db, "alone", big=big, alone=None)
        assert alone.exact_ok, alone.exact
        rows: list[Figure] = []
        timings = [f"set-up {setup:.0f}", f"alone {alone.seconds:.0f}"]
        for key in SCENARIOS:
            if key == "alone" or (only and key not in only):
                continue
            started = time.perf_counter()
            ours = run_scenario(url, db, key, big=big, alone=alone)
            rows += _rows(key, ours, alone)
            timings.append(f"{key} {time.perf_counter() - started:.0f}")
    finally:
        db.dispose()
    timings.append(f"total {time.perf_counter() - began:.0f}")
    rows[0]["note"] += (
        f"; alone: {alone.items:,} items in {alone.seconds:.0f} s, {alone.exact};"
        f" stress until {SHARE:.0%} of the items were done; module times (s): " + ", ".join(timings)
    )
    return rows


def figures() -> list[Figure]:
    server = postgres_server()
    if server is None:
        return _skipped_rows("no PostgreSQL server (BENCHLEDGER_TEST_PG_URL)")
    with postgres_database(server) as url:
        return measure(url)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from run_all import render

    global ITEMS
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--only", default="", help="comma-separated: idle,readers,verify,offered")
    args = parser.parse_args(argv)
    server = postgres_server()
    if server is None:
        print(render(_skipped_rows("no PostgreSQL server (BENCHLEDGER_TEST_PG_URL)")))
        return 0
    ITEMS = args.items
    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    with postgres_database(server) as url:
        print(render(measure(url, only)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
