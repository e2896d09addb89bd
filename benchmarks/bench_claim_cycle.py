"""SQLite claim -> complete, one cycle, against a bare sqlite3 loop of the same statements.

For each size (1k, 10k, 100k items) one campaign is created and all but its
last items are marked succeeded, so a claim has to get past many finished
rows. Then, in alternating rounds on the same campaign, the same database
file and the same journal/sync settings (WAL, ``synchronous`` as benchledger's
connection has it), ``CampaignService.claim`` + ``complete`` and a bare
sqlite3 loop run the same transactions with benchledger's own SQL text (each
statement as compiled for SQLite, its parameters laid out by
``Prebuilt.form``): ``BEGIN IMMEDIATE``; the claim (the sweep of expired
leases and the lease of the next item, one ``UPDATE ... RETURNING``);
``COMMIT``; then ``BEGIN IMMEDIATE``; the compare-and-set completion,
``RETURNING``; the attempt's history row (``RECORD_ATTEMPT``, as benchledger's
completion writes it); the campaign touch (benchledger skips it within a second
of its last one, the bare loop never does); ``COMMIT``. The two sides alternate every 20
cycles (a commit's fsync on a shared disk varies by several times within
seconds: fine alternation lets both sides see the same disk); the figure is
the mean time per cycle over all rounds; flatness compares 100k items to 1k.

    .venv/bin/python benchmarks/bench_claim_cycle.py [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _campaigns import fast_forward, plan, result
from _figures import Figure, figure
from sqlalchemy.dialects import sqlite

from benchledger.db import Database
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.integrity import result_seal
from benchledger.repositories.campaigns.attempts import RECORD_ATTEMPT
from benchledger.repositories.campaigns.leases import CLAIM, WorkLeases
from benchledger.repositories.campaigns.store import TOUCH_CAMPAIGN
from benchledger.services.campaigns import CampaignService

SIZES = (1_000, 10_000, 100_000)
ROUNDS = 20
CYCLES = 20  # per round and side: fine-grained, so both sides see the same disk
_DIALECT = sqlite.dialect()


def _bare_cycles(connection: sqlite3.Connection, campaign_id: str, cycles: int) -> float:
    """Mean seconds per bare claim + complete cycle: benchledger's own SQL, on sqlite3."""
    claim_sql = CLAIM.form(_DIALECT)
    complete_sql = WorkLeases.statements.complete.form(_DIALECT)
    touch_sql = TOUCH_CAMPAIGN.form(_DIALECT)
    history_sql = RECORD_ATTEMPT.form(_DIALECT)
    started = time.perf_counter()
    for _ in range(cycles):
        now = time.time()
        token = secrets.token_urlsafe(32)
        connection.execute("BEGIN IMMEDIATE")
        rows = connection.execute(
            claim_sql.sql,
            claim_sql.arguments(
                {
                    "cid": campaign_id,
                    "now": now,
                    "owner": "bench-bare",
                    "token": token,
                    "expires_at": now + 300,
                }
            ),
        ).fetchall()
        connection.execute("COMMIT")
        work_id, locale, case_key, _status, attempts, max_attempts = rows[0][:6]
        text = canonical_json({"target_locale": locale, "case_key": case_key, "score": 0.5})
        digest = sha256_text(text)
        done = time.time()
        connection.execute("BEGIN IMMEDIATE")
        outcome = connection.execute(
            complete_sql.sql,
            complete_sql.arguments(
                {
                    "c_work_id": work_id,
                    "c_campaign_id": campaign_id,
                    "c_locale": locale,
                    "c_case": case_key,
                    "c_attempt": attempts,
                    "c_max_attempts": max_attempts,
                    "c_owner": "bench-bare",
                    "c_token": token,
                    "c_expires_at": now + 300,
                    "now": done,
                    "result_json_": text,
                    "result_sha256_": digest,
                    "result_seal_": result_seal(work_id, attempts, max_attempts, digest),
                }
            ),
        ).fetchone()
        assert outcome is not None
        connection.execute(
            history_sql.sql,
            history_sql.arguments(
                {
                    "c_work_id": work_id,
                    "a_attempt": attempts,
                    "a_worker": "bench-bare",
                    "now": done,
                    "a_outcome": "succeeded",
                    "a_code": None,
                    "a_duration": None,
                }
            ),
        )
        connection.execute(
            touch_sql.sql,
            touch_sql.arguments({"cid": campaign_id, "threshold": done - 1.0, "now": done}),
        ).fetchall()
        connection.execute("COMMIT")
    return (time.perf_counter() - started) / cycles


def _service_cycles(service: CampaignService, campaign_id: str, cycles: int) -> float:
    started = time.perf_counter()
    for _ in range(cycles):
        claim = service.claim(campaign_id, "bench-worker")
        assert claim is not None
        service.complete(claim, result(claim))
    return (time.perf_counter() - started) / cycles


def measure(
    root: Path, items: int, rounds: int = ROUNDS, cycles: int = CYCLES
) -> tuple[float, float, int]:
    """(benchledger, bare) median seconds per cycle at ``items``, and the sync level."""
    db = Database(f"sqlite:///{root / f'cycle-{items}.sqlite'}")
    try:
        db.upgrade()
        service = CampaignService(db)
        policy, suite = plan(items)
        campaign_id = service.create(policy, suite)
        cycles = min(cycles, (items - 10) // (2 * rounds))
        fast_forward(db, campaign_id, 2 * rounds * cycles + 10)
        with db.engine.connect() as connection:
            journal = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
            synchronous = int(connection.exec_driver_sql("PRAGMA synchronous").scalar() or 0)
        assert str(journal).lower() == "wal"
        bare = sqlite3.connect(db.sqlite_path or "", isolation_level=None)
        bare.execute(f"PRAGMA synchronous = {synchronous}")
        bare.execute("PRAGMA busy_timeout = 30000")
        bare.execute("PRAGMA foreign_keys = ON")
        ours, theirs = [], []
        _service_cycles(service, campaign_id, 5)  # warm both (compiled cache, page cache)
        _bare_cycles(bare, campaign_id, 5)
        for _ in range(rounds):
            ours.append(_service_cycles(service, campaign_id, cycles))
            theirs.append(_bare_cycles(bare, campaign_id, cycles))
        bare.close()
        return statistics.mean(ours), statistics.mean(theirs), synchronous
    finally:
        db.dispose()


def figures(sizes: tuple[int, ...] = SIZES) -> list[Figure]:
    rows: list[Figure] = []
    at: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cycle-") as workdir:
        for items in sizes:
            ours, bare, synchronous = measure(Path(workdir), items)
            at[items] = (ours, bare)
            rows.append(
                figure(
                    f"SQLite claim -> complete, {items:,} items",
                    "ms/cycle",
                    ours * 1000,
                    bare * 1000,
                    "bare sqlite3, same statements",
                    "<= 1.5x",
                    f"WAL, synchronous={synchronous}; {ROUNDS} alternating rounds of {CYCLES}",
                )
            )
    low, high = min(at), max(at)
    if low != high:
        ours_growth = at[high][0] / at[low][0]
        bare_growth = at[high][1] / at[low][1]
        rows.append(
            figure(
                f"SQLite cycle flatness, {high:,} vs {low:,} items",
                "x",
                ours_growth,
                bare_growth,
                "the bare loop's growth, same runs",
                "<= 1.2x",
                "cycle time at the large size / at the small size; the ratio divides out"
                " the disk's drift between the sizes (both sides grow with it)",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    from run_all import render

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(size) for size in SIZES))
    args = parser.parse_args(argv)
    print(render(figures(tuple(int(part) for part in args.sizes.split(",")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
