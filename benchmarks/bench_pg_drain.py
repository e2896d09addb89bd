"""PostgreSQL: worker processes draining a campaign, against a bare psycopg SKIP LOCKED loop.

benchledger: N processes (4, then 1), each with its own ``Database`` and
``CampaignService``, loop ``claim`` -> ``complete`` until nothing is left. The
reference, in the same run on the same server: N processes of bare psycopg, each
looping ``UPDATE jobs SET ... WHERE id = (SELECT id ... ORDER BY ord LIMIT 1 FOR
UPDATE SKIP LOCKED) RETURNING id; COMMIT; UPDATE jobs SET status = 'done', result =
... WHERE id = ...; COMMIT`` over a table of the same size with a partial index on
the pending rows. Items per second is items drained / wall time from one start
signal to the last process's end; 3 alternating rounds per side (ours, bare,
ours ...), each on a fresh campaign or table, and the median of each side. Every
claimed work id is collected: an id claimed twice (leases are 300 s, none expires)
is a double claim.

Worker RSS: 4 processes drain the last items of a 100,000-item campaign; the
figure is the largest peak RSS of them, beside a bare psycopg worker's.

    BENCHLEDGER_TEST_PG_URL=... .venv/bin/python benchmarks/bench_pg_drain.py
"""

from __future__ import annotations

import multiprocessing
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _campaigns import fast_forward, plan, result
from _figures import Figure, figure, postgres_database, postgres_server, psycopg_dsn, skipped

CAMPAIGN_ITEMS = 10_000
DRAIN = {4: 1_000, 1: 400}  # items drained per round, by process count
ROUNDS = 3  # alternating rounds per side: ours, bare, ours, bare ...
RSS_ITEMS = 100_000
RSS_DRAIN = 1_000

# spawn: each worker is a fresh interpreter (its RSS is its own, not a copy of ours).
_CONTEXT = multiprocessing.get_context("spawn")


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: per address space, so a fresh interpreter's own;
    getrusage's ru_maxrss keeps the forking parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _ours(url: str, campaign_id: str, name: str, start: Any, out: Any) -> None:
    from benchledger.db import Database
    from benchledger.services.campaigns import CampaignService

    db = Database(url)
    service = CampaignService(db)
    service.policy(campaign_id)  # the stored plan, loaded once per process like a worker's
    claimed = []
    out.put("ready")
    start.wait()
    cpu = _cpu()
    while (claim := service.claim(campaign_id, name)) is not None:
        claimed.append(claim.work_id)
        service.complete(claim, result(claim))
    out.put((claimed, time.perf_counter(), _peak_rss_mb(), _cpu() - cpu))
    db.dispose()


def _bare(dsn: str, table: str, name: str, start: Any, out: Any) -> None:
    import psycopg

    claimed = []
    with psycopg.connect(dsn) as connection:
        out.put("ready")
        start.wait()
        cpu = _cpu()
        while True:
            row = connection.execute(
                f"UPDATE {table} SET status = 'leased', owner = %s WHERE id ="
                f" (SELECT id FROM {table} WHERE status = 'pending' ORDER BY ord LIMIT 1"
                " FOR UPDATE SKIP LOCKED) RETURNING id",
                (name,),
            ).fetchone()
            connection.commit()
            if row is None:
                break
            claimed.append(row[0])
            connection.execute(
                f"UPDATE {table} SET status = 'done', result = %s WHERE id = %s AND owner = %s",
                ('{"score":0.5}', row[0], name),
            )
            connection.commit()
    out.put((claimed, time.perf_counter(), _peak_rss_mb(), _cpu() - cpu))


def _run(
    target: Any, args: tuple[Any, ...], processes: int
) -> tuple[float, int, int, float, float]:
    """(items/s, items, double claims, peak RSS MB, client CPU s) of ``processes``
    copies of ``target``; the CPU is the processes' own from the start signal on."""
    start = _CONTEXT.Event()
    out = _CONTEXT.Queue()
    workers = [
        _CONTEXT.Process(target=target, args=(*args, f"w{index}", start, out), daemon=True)
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:  # every process connected and loaded before the start signal
            assert out.get(timeout=120) == "ready"
        began = time.perf_counter()
        start.set()
        reports = [out.get(timeout=600) for _ in workers]
    finally:  # a worker that failed must not leave the others waiting for ever
        start.set()
        for worker in workers:
            worker.join(60)
            if worker.is_alive():
                worker.terminate()
    ended = max(report[1] for report in reports)
    claims = Counter(work_id for report in reports for work_id in report[0])
    items = sum(claims.values())
    doubles = sum(count - 1 for count in claims.values() if count > 1)
    rss = max(report[2] for report in reports)
    return items / (ended - began), items, doubles, rss, sum(report[3] for report in reports)


def _campaign(url: str, items: int, drain: int) -> str:
    from benchledger.db import Database
    from benchledger.services.campaigns import CampaignService

    db = Database(url)
    try:
        db.upgrade()
        policy, suite = plan(items)
        campaign_id = CampaignService(db).create(policy, suite)
        fast_forward(db, campaign_id, drain)
        return campaign_id
    finally:
        db.dispose()


def _bare_table(dsn: str, items: int, drain: int, table: str = "bare_jobs") -> None:
    import psycopg

    with psycopg.connect(dsn) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(
            f"CREATE TABLE {table} (id TEXT PRIMARY KEY, ord TEXT NOT NULL,"
            " status TEXT NOT NULL, owner TEXT, result TEXT)"
        )
        connection.execute(f"CREATE INDEX {table}_ready ON {table} (ord) WHERE status = 'pending'")
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} VALUES (%s, %s, %s, NULL, NULL)",
                [
                    (f"job-{i:07d}", f"{i:07d}", "done" if i < items - drain else "pending")
                    for i in range(items)
                ],
            )
        connection.commit()
        connection.execute(f"ANALYZE {table}")
        connection.commit()


def figures() -> list[Figure]:
    server = postgres_server()
    names = [
        (f"PostgreSQL drain, {n} process{'es' if n > 1 else ''}", ">= 0.7x" if n > 1 else ">= 0.5x")
        for n in DRAIN
    ]
    if server is None:
        return [
            skipped(name, "items/s", "bare psycopg SKIP LOCKED loop", goal, "no PostgreSQL")
            for name, goal in names
        ] + [skipped("worker RSS", "MB", "bare psycopg worker", "<= 120 MB", "no PostgreSQL")]
    rows: list[Figure] = []
    for (name, goal), (processes, drain) in zip(names, DRAIN.items(), strict=True):
        ours: list[float] = []
        bare: list[float] = []
        cpu = {"ours": 0.0, "bare": 0.0}
        doubles = {"ours": 0, "bare": 0}
        with postgres_database(server) as url:
            dsn = psycopg_dsn(url)
            for round_ in range(ROUNDS):  # alternating, so load drift hits both sides alike
                campaign_id = _campaign(url, CAMPAIGN_ITEMS, drain)
                table = f"bare_jobs_{round_}"
                _bare_table(dsn, CAMPAIGN_ITEMS, drain, table)
                rate, items, double, _rss, seconds = _run(_ours, (url, campaign_id), processes)
                assert items == drain, (items, drain)
                ours.append(rate)
                cpu["ours"] += seconds
                doubles["ours"] += double
                rate, items, double, _rss, seconds = _run(_bare, (dsn, table), processes)
                assert items == drain, (items, drain)
                bare.append(rate)
                cpu["bare"] += seconds
                doubles["bare"] += double
        per_item = {side: 1000 * cpu[side] / (ROUNDS * drain) for side in cpu}
        rows.append(
            figure(
                name,
                "items/s",
                statistics.median(ours),
                statistics.median(bare),
                "bare psycopg SKIP LOCKED loop",
                goal,
                f"median of {ROUNDS} alternating rounds of {drain:,} of {CAMPAIGN_ITEMS:,}"
                f" items (ours {', '.join(f'{r:.0f}' for r in ours)}; bare"
                f" {', '.join(f'{r:.0f}' for r in bare)}); double claims {doubles['ours']}"
                f" (bare {doubles['bare']}); client CPU per item {per_item['ours']:.2f} ms"
                f" (bare {per_item['bare']:.2f} ms)",
            )
        )
    with postgres_database(server) as url:
        campaign_id = _campaign(url, RSS_ITEMS, RSS_DRAIN)
        _rate, items, rss_doubles, rss, _cpu_s = _run(_ours, (url, campaign_id), 4)
        dsn = psycopg_dsn(url)
        _bare_table(dsn, RSS_ITEMS, RSS_DRAIN)
        _rate, _items, _doubles, bare_rss, _cpu_s = _run(_bare, (dsn, "bare_jobs"), 4)
    rows.append(
        figure(
            f"worker peak RSS, {RSS_ITEMS:,}-item campaign (PostgreSQL)",
            "MB",
            rss,
            bare_rss,
            "bare psycopg worker",
            "<= 120 MB",
            f"largest of 4 workers draining its last {items:,} items; double claims {rss_doubles}",
        )
    )
    return rows


def main() -> int:
    from run_all import render

    print(render(figures()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
