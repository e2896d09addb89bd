"""Batched claims and group commit: a worker's lanes against bare loops of the same work.

benchledger: ``Worker(concurrency=16)`` with a no-op evaluator drains a fresh
campaign in one process (batching on, the default; then off, as before), and in
4 processes on PostgreSQL. Items per second from the first claim to the last
commit; client CPU per item is the process's user+system CPU over its items.

References, in the same run on the same database:

- PostgreSQL, a bare psycopg loop in as many processes: ``UPDATE ... WHERE id IN
  (SELECT id ... ORDER BY ord LIMIT 32 FOR UPDATE SKIP LOCKED) RETURNING id``,
  commit, then one ``UPDATE ... SET status = 'done' WHERE id = ANY(...)``, commit
  (no tokens, no per-row fencing, no history, no signatures);
- PostgreSQL, benchledger's own statements in a bare psycopg loop in as many
  processes: each round is the transaction a worker's group commit runs (the
  plan setting, ``COMPLETE_MANY`` of the last round's 16 results, the batched
  claim of 16), with the same result text, digest and seal per item, and no
  Python around it (no checks, no lanes, no result objects). What benchledger
  reaches beside it is what its Python costs; what it reaches beside the other
  references is what its SQL costs;
- PostgreSQL, pgqueuer (the ``bench`` extra) with its documented throughput
  settings: ``batch_size=100``, ``durability=balanced``, its autovacuum
  settings; a no-op entrypoint, ``mode=drain``, in as many processes. Its
  completions are buffered and flushed later (at least once); ours return
  only after their commit;
- SQLite, a bare single-row sqlite3 loop: claim one row, commit, complete it,
  commit, on a file with benchledger's settings (WAL, ``synchronous=FULL``: every
  commit is durable, which is what a group commit shares among many items).

Each drain is checked exactly-once (every item succeeded, one ``succeeded`` row in
the history each). Every system drains ``ROUNDS`` times, the systems in turn within
each round (each round starting one system further on), and each figure is the
median of its rounds: this machine's speed drifts by half within minutes, and one
drain each put a slow phase on one system alone. On PostgreSQL every drain starts
after a ``VACUUM`` and a ``CHECKPOINT``: a drain right after another otherwise runs
beside the autovacuum of the first one's dead rows.
"""

from __future__ import annotations

import multiprocessing
import resource
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from _campaigns import plan, result
from _figures import Figure, figure, postgres_database, postgres_server, psycopg_dsn

PG_ITEMS = 10_000
SQLITE_ITEMS = 2_000
K = 16
#: Each system drains this many times, the systems in turn, round after round; a figure
#: is the median of its rounds (this machine's speed drifts by half within minutes).
ROUNDS = 3
ROUNDS_NOTE = f"medians of {ROUNDS} interleaved rounds"
_CONTEXT = multiprocessing.get_context("spawn")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _in_processes(
    processes: int, job: Callable[[int, Any, Any], tuple[Any, tuple[Any, ...]]]
) -> list[Any]:
    """Run ``job(i, out, start)``'s (target, args) in ``processes`` spawned processes at once;
    each gets ready (imports, connections), waits on the ``start`` barrier, then drains and
    puts its report on ``out``: the reports, once every process ended. The barrier keeps
    one process's start-up from running beside another's drain: the span measures the
    processes draining together, nothing else."""
    out = _CONTEXT.Queue()
    start = _CONTEXT.Barrier(processes)
    workers = [
        _CONTEXT.Process(target=target, args=args)
        for target, args in (job(i, out, start) for i in range(processes))
    ]
    for worker in workers:
        worker.start()
    reports = [out.get(timeout=900) for _ in workers]
    for worker in workers:
        worker.join()
    return reports


def _span(reports: list[Any]) -> float:
    """Seconds from the first process's start to the last one's end (``(done, start,
    end, cpu)`` each, wall-clock times): the processes' drains overlap, not add up."""
    working = [report for report in reports if report[0]]  # a process that got no job
    return max(report[2] for report in working) - min(report[1] for report in working)


def _drain(url: str, campaign_id: str, name: str, batching: bool, out: Any, start: Any) -> None:
    from benchledger.db import Database
    from benchledger.services.campaigns import CampaignService
    from benchledger.workers.loop import Worker

    database = Database(url, pool_size=4)
    campaigns = CampaignService(database)
    campaigns.policy(campaign_id)  # the plan, read before the clock starts
    start.wait()
    cpu, started = _cpu(), time.time()
    summary = Worker(
        campaigns,
        campaign_id,
        name,
        lambda claim, heartbeat: result(claim),
        concurrency=K,
        batching=batching,
        finalize_report=False,
    ).run()
    out.put((summary.succeeded, started, time.time(), _cpu() - cpu))
    database.dispose()


def _ours(url: str, processes: int, items: int, batching: bool) -> tuple[float, float]:
    """(items/s, client CPU ms per item) of ``processes`` workers draining ``items``."""
    from benchledger.db import Database
    from benchledger.services.campaigns import CampaignService

    database = Database(url)
    database.upgrade()
    service = CampaignService(database)
    policy, suite = plan(items)
    campaign_id = service.create(policy, suite)
    reports = _in_processes(
        processes,
        lambda i, out, start: (_drain, (url, campaign_id, f"w{i}", batching, out, start)),
    )
    done = sum(report[0] for report in reports)
    longest = _span(reports)
    cpu = sum(report[3] for report in reports)
    _check_once(database, campaign_id, done)
    database.dispose()
    return done / longest, 1000 * cpu / done


def _check_once(database: Any, campaign_id: str, done: int) -> None:
    """Every item of the campaign succeeded, ``done`` of them, with one success row each."""
    from benchledger.services.campaigns import CampaignService

    status = CampaignService(database).status(campaign_id)
    assert status.counts["succeeded"] == status.work_count == done, (status.counts, done)
    with database.engine.connect() as connection:  # exactly once: one success row each
        succeeded = connection.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT work_id) FROM benchmark_campaign_attempts "
                "WHERE campaign_id = :c AND outcome = 'succeeded'"
            ),
            {"c": campaign_id},
        ).one()
    assert tuple(succeeded) == (done, done), (tuple(succeeded), done)


def _bare_pg(dsn: str, table: str, out: Any, start: Any) -> None:
    import psycopg

    with psycopg.connect(dsn) as connection:
        start.wait()
        cpu, started, done = _cpu(), time.time(), 0
        while True:
            with connection.transaction():
                ids = [
                    row[0]
                    for row in connection.execute(
                        f"UPDATE {table} SET status = 'leased' WHERE id IN (SELECT id FROM "
                        f"{table} WHERE status = 'pending' ORDER BY ord LIMIT 32 "
                        "FOR UPDATE SKIP LOCKED) RETURNING id"
                    )
                ]
            if not ids:
                break
            with connection.transaction():
                connection.execute(
                    f"UPDATE {table} SET status = 'done', result = %s WHERE id = ANY(%s)",
                    ('{"score": 0.5}', ids),
                )
            done += len(ids)
        out.put((done, started, time.time(), _cpu() - cpu))


def _bare_pg_run(dsn: str, processes: int, items: int) -> tuple[float, float]:
    import psycopg

    table = f"bare_batch_{processes}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, ord bigint, status text, result text)"
        )
        connection.execute(
            f"INSERT INTO {table} SELECT i, i, 'pending', NULL FROM generate_series(1, %s) i",
            (items,),
        )
        connection.execute(f"CREATE INDEX ON {table} (ord) WHERE status = 'pending'")
    reports = _in_processes(processes, lambda _i, out, start: (_bare_pg, (dsn, table, out, start)))
    done = sum(report[0] for report in reports)
    assert done == items, done
    return done / _span(reports), 1000 * sum(r[3] for r in reports) / done


def _own_statements(dsn: str, campaign_id: str, name: str, out: Any, start: Any) -> None:
    """One process of :func:`_own_statements_run`: rounds of a group commit's transaction."""
    import hashlib
    import secrets
    from types import SimpleNamespace

    import psycopg
    from psycopg.rows import namedtuple_row
    from sqlalchemy.dialects import postgresql

    from benchledger.domain.canonical import canonical_json
    from benchledger.repositories.campaigns.completions import (
        COMPLETE_MANY,
        batch_json,
        entry_rows,
    )
    from benchledger.repositories.campaigns.leases import GENERIC_PLANS, claims_batched

    dialect = postgresql.psycopg.dialect()
    claim, complete = claims_batched(K).form(dialect), COMPLETE_MANY.form(dialect)
    with psycopg.connect(dsn, row_factory=namedtuple_row) as connection:
        found = connection.execute(
            "SELECT suite_sha256 FROM benchmark_campaigns WHERE campaign_id = %s", (campaign_id,)
        ).fetchone()
        assert found is not None
        suite = found[0]
        connection.commit()  # else each round would be a savepoint of this one transaction
        start.wait()
        cpu, started, done, pending = _cpu(), time.time(), 0, []
        while True:
            now = time.time()
            with connection.transaction():
                connection.execute(GENERIC_PLANS)
                if pending:
                    batch = {"batch": batch_json(pending), "entries": len(pending), "now": now}
                    done += len(
                        connection.execute(complete.sql, complete.arguments(batch)).fetchall()
                    )
                lease = {"cid": campaign_id, "now": now, "owner": name, "expires_at": now + 60}
                lease["token"] = secrets.token_urlsafe(32)
                rows = connection.execute(claim.sql, claim.arguments(lease)).fetchall()
            entries = []
            for row in rows:
                if row.status != "leased":
                    continue
                text = canonical_json(
                    {
                        "target_locale": row.target_locale,
                        "suite": {"case_key": row.suite_case_key, "suite_sha256": suite},
                        "score": 0.5,
                    }
                )
                lease_held = SimpleNamespace(
                    work_id=row.work_id,
                    campaign_id=campaign_id,
                    target_locale=row.target_locale,
                    suite_case_key=row.suite_case_key,
                    attempt=row.attempts,
                    max_attempts=row.max_attempts,
                    lease_owner=name,
                    lease_token=row.lease_token,
                    lease_expires_at=now + 60,
                )
                entries.append((lease_held, text, hashlib.sha256(text.encode()).hexdigest(), 0.0))
            pending = entry_rows(entries)
            if not pending:
                break
        out.put((done, started, time.time(), _cpu() - cpu))


def _own_statements_run(url: str, processes: int, items: int) -> tuple[float, float]:
    """(items/s, client CPU ms per item) of :func:`_own_statements` draining a fresh
    campaign of ``items`` in ``processes`` processes; checked exactly-once and verified."""
    from benchledger.db import Database
    from benchledger.services.campaigns import CampaignService

    database = Database(url)
    service = CampaignService(database)
    campaign_id = service.create(*plan(items))
    dsn = psycopg_dsn(url)
    reports = _in_processes(
        processes,
        lambda i, out, start: (_own_statements, (dsn, campaign_id, f"bare{i}", out, start)),
    )
    done = sum(report[0] for report in reports)
    _check_once(database, campaign_id, done)
    assert service.verify(campaign_id).ok  # the rows are what benchledger itself writes
    database.dispose()
    return done / _span(reports), 1000 * sum(report[3] for report in reports) / done


def _pgqueuer(dsn: str, out: Any, start: Any) -> None:
    import asyncio
    from datetime import timedelta

    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    async def drain() -> tuple[int, float, float, float]:
        done, first, last = 0, 0.0, 0.0
        connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        manager = QueueManager(Queries(PsycopgDriver(connection)))

        @manager.entrypoint("noop")
        async def noop(job: Any) -> None:
            nonlocal done, first, last
            last = time.time()
            first = first or last
            done += 1

        start.wait()  # every process connected and its manager built: all drain together
        cpu = _cpu()
        await manager.run(
            batch_size=100,
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=1),
            log_aggregation_interval=timedelta(0),
        )
        used = _cpu() - cpu
        await connection.close()
        # Its first job to its last: its start-up and its drain's empty-queue wait left out.
        return done, first, last, used

    out.put(asyncio.run(drain()))


def _pgqueuer_run(dsn: str, processes: int, items: int) -> tuple[float, float] | None:
    """(jobs/s, client CPU ms per job) of pgqueuer draining ``items`` no-op jobs in
    ``processes`` processes; None without pgqueuer (``pip install -e '.[bench]'``)."""
    import asyncio
    import os

    try:
        import psycopg
        from pgqueuer import PsycopgDriver, Queries
    except ImportError:
        return None
    os.environ["PGQUEUER_DURABILITY"] = "balanced"  # before its settings are read

    async def setup() -> None:
        connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        queries = Queries(PsycopgDriver(connection))
        if await queries.schema_is_installed():
            await queries.uninstall()
        await queries.install()
        await queries.optimize_autovacuum()
        await queries.enqueue(["noop"] * items, [None] * items, [0] * items)
        await connection.close()

    asyncio.run(setup())
    reports = _in_processes(processes, lambda _i, out, start: (_pgqueuer, (dsn, out, start)))
    done = sum(report[0] for report in reports)
    assert done == items, done  # a drain runs each job once here (no crash, no retry)
    return done / _span(reports), 1000 * sum(r[3] for r in reports) / done


def _bare_sqlite(path: str, items: int) -> float:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")  # benchledger's: SQLite's default
    connection.execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, ord INTEGER, status TEXT, result TEXT)"
    )
    connection.executemany(
        "INSERT INTO jobs VALUES (?, ?, 'pending', NULL)", [(i, i) for i in range(items)]
    )
    connection.execute("CREATE INDEX jobs_pending ON jobs (ord) WHERE status = 'pending'")
    started, done = time.perf_counter(), 0
    while True:
        connection.execute("BEGIN IMMEDIATE")
        row = connection.execute(
            "UPDATE jobs SET status = 'leased' WHERE id = (SELECT id FROM jobs "
            "WHERE status = 'pending' ORDER BY ord LIMIT 1) RETURNING id"
        ).fetchone()
        connection.execute("COMMIT")
        if row is None:
            break
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "UPDATE jobs SET status = 'done', result = ? WHERE id = ?", ('{"score": 0.5}', row[0])
        )
        connection.execute("COMMIT")
        done += 1
    connection.close()
    return done / (time.perf_counter() - started)


def _pickup(url: str, listen: bool, creates: int = 10) -> float:
    """Median seconds from ``create()`` to the first claim by an idle fleet (poll: 1 s)."""
    import statistics
    import threading

    from benchledger.db import Database
    from benchledger.services.campaigns import CampaignService
    from benchledger.workers.fleet import FleetWorker

    database = Database(url)
    database.upgrade()
    service = CampaignService(database)
    claimed = threading.Event()

    def evaluate(claim: Any, heartbeat: Any) -> Any:
        claimed.set()
        return result(claim)

    # The reference sleeps out its idle waits: no listener. (A hook that no longer
    # existed once let the reference listen too, and measured the same wake-up twice.)
    assert callable(getattr(FleetWorker, "_listens", None)), "Worker._listens was renamed"

    class Fleet(FleetWorker):
        def _listens(self) -> bool:
            return super()._listens() and listen

    stop = threading.Event()
    fleet = Fleet(
        service, "idle", {"noop": evaluate}, forever=True, poll_seconds=1.0,
        refresh_seconds=60.0, should_stop=stop.is_set,
    )  # fmt: skip
    thread = threading.Thread(target=fleet.run)
    thread.start()
    waits = []
    try:
        time.sleep(1.5)
        for _ in range(creates):
            claimed.clear()
            policy, suite = plan(4)
            service.create(policy, suite, evaluator="noop")
            started = time.perf_counter()  # committed: the notification is on its way
            assert claimed.wait(30)
            waits.append(time.perf_counter() - started)
            time.sleep(0.3 + 0.7 * (len(waits) % 3) / 3)  # idle again, at varied phases
    finally:
        stop.set()
        thread.join()
        database.dispose()
    return statistics.median(waits)


def _rounds(
    systems: dict[str, Callable[[int], tuple[float, float] | None]],
    settle: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Each system's (items/s, client CPU ms per item): the medians of :data:`ROUNDS`
    drains, the systems in turn within each round (so a slow phase of the machine
    falls on all of them), each round starting one system further on (so none always
    follows the same one), and ``settle()`` before each drain; None for a system
    that is not installed."""
    import statistics

    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in systems}
    names = list(systems)
    for index in range(ROUNDS):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            settle()
            measured = systems[name](index)
            if measured is not None:
                seen[name].append(measured)
    return {
        name: (
            statistics.median(rate for rate, _ in runs),
            statistics.median(cpu for _, cpu in runs),
        )
        if runs
        else None
        for name, runs in seen.items()
    }


def _settle(dsn: str) -> None:
    """PostgreSQL: every table vacuumed and a checkpoint taken, so that no drain runs
    beside the autovacuum of the one before it (measured: that alone decided which of
    two equal drains was faster) or its checkpoint."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM")
        connection.execute("CHECKPOINT")


def _sqlite_url(directory: str, name: str) -> str:
    return f"sqlite:///{Path(directory) / name}"


def figures() -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-batching-") as directory:
        runs = _rounds(
            {
                "bare": lambda i: (
                    _bare_sqlite(str(Path(directory) / f"bare{i}.db"), SQLITE_ITEMS),
                    0.0,
                ),
                "on": lambda i: _ours(_sqlite_url(directory, f"on{i}.db"), 1, SQLITE_ITEMS, True),
                "off": lambda i: _ours(
                    _sqlite_url(directory, f"off{i}.db"), 1, SQLITE_ITEMS, False
                ),
            }
        )
        (bare, _), (on, on_cpu), (off, off_cpu) = runs["bare"], runs["on"], runs["off"]
        rows.append(
            figure(
                f"SQLite, 1 process, Worker K={K}, batching on, {SQLITE_ITEMS:,} items",
                "items/s",
                on,
                bare,
                "bare single-row sqlite3 loop",
                ">= 2x",
                f"batching off: {off:.0f}/s ({off / bare:.2f}x); client CPU {on_cpu:.2f} ms/item "
                f"(off: {off_cpu:.2f}); {ROUNDS_NOTE}",
            )
        )
    server = postgres_server()
    if server is None:
        return rows
    with postgres_database(server) as url:
        listening, polling = _pickup(url, True), _pickup(url, False)
        rows.append(
            figure(
                "PostgreSQL: create()'s commit -> first claim by an idle fleet (p50 of 10)",
                "ms",
                1000 * listening,
                1000 * polling,
                "the same fleet polling every 1 s",
                "< 50 ms",
            )
        )
        dsn = psycopg_dsn(url)
        for processes in (1, 4):
            runs = _rounds(
                {
                    "bare": lambda _i, n=processes: _bare_pg_run(dsn, n, PG_ITEMS),
                    "peer": lambda _i, n=processes: _pgqueuer_run(dsn, n, PG_ITEMS),
                    "own": lambda _i, n=processes: _own_statements_run(url, n, PG_ITEMS),
                    "on": lambda _i, n=processes: _ours(url, n, PG_ITEMS, True),
                    "off": lambda _i, n=processes: _ours(url, n, PG_ITEMS, False),
                },
                settle=lambda: _settle(dsn),
            )
            (bare_rate, bare_cpu), peer = runs["bare"], runs["peer"]
            (own_rate, own_cpu), (on, on_cpu), (off, off_cpu) = runs["own"], runs["on"], runs["off"]
            if peer is not None:
                rows.append(
                    figure(
                        f"PostgreSQL, {processes} process(es), Worker K={K} vs pgqueuer "
                        f"(batch 100, balanced, autovac), {PG_ITEMS:,} items",
                        "items/s",
                        on,
                        peer[0],
                        "pgqueuer 1.6, no-op entrypoint, drain",
                        ">= 1x" if processes == 4 else "",
                        f"client CPU {on_cpu:.2f} ms/item (pgqueuer {peer[1]:.2f}); pgqueuer "
                        f"acknowledges later (at least once), ours after the commit; {ROUNDS_NOTE}",
                    )
                )
            rows.append(
                figure(
                    f"PostgreSQL, {processes} process(es), Worker K={K}, batching on, "
                    f"{PG_ITEMS:,} items",
                    "items/s",
                    on,
                    bare_rate,
                    "bare psycopg loop, 32 per claim",
                    ">= 0.5x",
                    f"batching off: {off:.0f}/s; client CPU {on_cpu:.2f} ms/item (off: "
                    f"{off_cpu:.2f}, bare {bare_cpu:.2f}); goal <= 0.2 ms/item; {ROUNDS_NOTE}",
                )
            )
            rows.append(
                figure(
                    f"PostgreSQL, {processes} process(es), Worker K={K} vs its own statements, "
                    f"{PG_ITEMS:,} items",
                    "items/s",
                    on,
                    own_rate,
                    f"benchledger's claim and group commit in a bare psycopg loop, {K} per round",
                    "",
                    f"client CPU {on_cpu:.2f} ms/item (bare loop of its statements "
                    f"{own_cpu:.2f}); the bare loop of its statements is "
                    f"{own_rate / bare_rate:.2f}x the bare batched loop"
                    + (f", {own_rate / peer[0]:.2f}x pgqueuer" if peer is not None else "")
                    + f"; {ROUNDS_NOTE}",
                )
            )
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for row in figures():
        print(row)
