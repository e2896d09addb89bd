"""SQLite claim -> complete, one cycle, against a bare sqlite3 loop of the same statements.

For each size (1k, 10k, 100k items) one campaign is created and all but its
last items are marked succeeded, so a claim has to get past many finished
rows. Then, in alternating rounds on the same campaign, the same database
file and the same journal/sync settings (WAL, ``synchronous`` as benchledger's
connection has it), ``CampaignService.claim`` + ``complete`` and a bare
sqlite3 loop run the same transactions: ``BEGIN IMMEDIATE``; the sweep of
expired leases; the lease of the next item, ``RETURNING``; ``COMMIT``; then
``BEGIN IMMEDIATE``; the compare-and-set completion, ``RETURNING``; the
throttled campaign touch; ``COMMIT``. The two sides alternate every 20
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

from benchledger.db import Database
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.services.campaigns import CampaignService

SIZES = (1_000, 10_000, 100_000)
ROUNDS = 20
CYCLES = 20  # per round and side: fine-grained, so both sides see the same disk

_SWEEP = """
WITH expired_leases AS (SELECT work_id FROM benchmark_campaign_work
  WHERE campaign_id = ? AND status = 'leased' AND lease_expires_at <= ?
  ORDER BY lease_expires_at LIMIT 100)
UPDATE benchmark_campaign_work SET
  status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'retry_wait' END,
  next_attempt_at = ?, last_error_code = 'benchmark.campaign.lease_expired',
  last_error_detail_hash = NULL, updated_at = ?,
  lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM expired_leases WHERE benchmark_campaign_work.work_id = expired_leases.work_id
RETURNING work_id
"""
_LEASE = """
WITH next_item AS (SELECT work_id FROM benchmark_campaign_work
  WHERE campaign_id = ? AND status IN ('pending', 'retry_wait') AND next_attempt_at <= ?
  AND attempts < max_attempts ORDER BY target_locale, suite_case_key LIMIT 1)
UPDATE benchmark_campaign_work SET status = 'leased', attempts = attempts + 1,
  lease_owner = ?, lease_token = ?, lease_expires_at = ?, last_error_code = NULL,
  last_error_detail_hash = NULL, updated_at = ?
FROM next_item WHERE benchmark_campaign_work.work_id = next_item.work_id
RETURNING work_id, target_locale, suite_case_key, attempts, max_attempts
"""
_COMPLETE = """
UPDATE benchmark_campaign_work SET updated_at = ?, lease_owner = NULL, lease_token = NULL,
  lease_expires_at = NULL, status = 'succeeded', last_error_code = NULL,
  last_error_detail_hash = NULL, result_json = ?, result_sha256 = ?
WHERE work_id = ? AND campaign_id = ? AND target_locale = ? AND suite_case_key = ?
  AND status = 'leased' AND attempts = ? AND max_attempts = ? AND lease_owner = ?
  AND lease_token = ? AND lease_expires_at = ? AND lease_expires_at > ?
RETURNING work_id, target_locale, suite_case_key, status, attempts, max_attempts,
  next_attempt_at, last_error_code, last_error_detail_hash, result_sha256
"""
_TOUCH = """
WITH due_campaign AS (SELECT campaign_id FROM benchmark_campaigns
  WHERE campaign_id = ? AND updated_at <= ?)
UPDATE benchmark_campaigns SET updated_at = ? FROM due_campaign
WHERE benchmark_campaigns.campaign_id = due_campaign.campaign_id
"""


def _bare_cycles(connection: sqlite3.Connection, campaign_id: str, cycles: int) -> float:
    """Mean seconds per bare claim + complete cycle."""
    started = time.perf_counter()
    for _ in range(cycles):
        now = time.time()
        token = secrets.token_urlsafe(32)
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(_SWEEP, (campaign_id, now, now, now)).fetchall()
        row = connection.execute(
            _LEASE, (campaign_id, now, "bench-bare", token, now + 300, now)
        ).fetchone()
        connection.execute("COMMIT")
        work_id, locale, case_key, attempts, max_attempts = row
        text = canonical_json({"target_locale": locale, "case_key": case_key, "score": 0.5})
        done = time.time()
        connection.execute("BEGIN IMMEDIATE")
        outcome = connection.execute(
            _COMPLETE,
            (
                done,
                text,
                sha256_text(text),
                work_id,
                campaign_id,
                locale,
                case_key,
                attempts,
                max_attempts,
                "bench-bare",
                token,
                now + 300,
                done,
            ),
        ).fetchone()
        assert outcome is not None
        connection.execute(_TOUCH, (campaign_id, done - 1.0, done))
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
