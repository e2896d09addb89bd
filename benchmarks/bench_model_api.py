"""Three campaigns, one provider's quota: how much of it a fleet uses, and how fairly.

Three campaigns of one provider share its limit group (at most 20 in flight,
600 claims a minute). ``benchledger work --all --workers 4 --concurrency 32``
serves them with the example HTTP evaluator (``benchledger.examples.model_api``)
against :class:`benchledger.testing.ModelServer` allowing 600 requests a minute
with 100 ms latency (over it: 429 with ``Retry-After``), adaptive concurrency on.

Figures (the reference is the provider's quota itself, the most any client
could get):

- requests answered per minute over the first two minutes, against 600/min
  (goal >= 90 %);
- each campaign's share of them, the smallest against an equal third
  (goal within 20 % of equal);
- attempts charged for 429s (goal 0) and the most requests in flight (cap 20).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import sqlalchemy as sa
from _campaigns import plan
from _figures import Figure, figure, postgres_database, postgres_server

from benchledger.db import Database
from benchledger.examples import model_api
from benchledger.models.campaign import AttemptRow, WorkRow
from benchledger.services.campaigns import CampaignService
from benchledger.testing.model_server import ModelServer

QUOTA = 600  # requests a minute, the provider's and the group's
SPAN = 120.0  # seconds measured: two quota windows
ITEMS = 3 * 520  # enough to keep the quota busy for the whole span
BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))


def _run(label: str, url: str) -> list[Figure]:
    database = Database(url)
    database.upgrade()
    service = CampaignService(database)
    campaign_ids = []
    for _ in range(3):
        policy, suite = plan(ITEMS // 3)
        campaign_ids.append(service.create(policy, suite, evaluator="judge"))
    group = service.status(campaign_ids[0]).limit_group
    assert group is not None
    service.set_group_limits(group, max_concurrent_leases=20, max_claims_per_minute=QUOTA)
    with ModelServer(per_minute=QUOTA, latency_seconds=0.1) as server:
        env = {**os.environ, model_api.URL_ENV: server.url}
        started = time.time()
        completed = subprocess.run(
            [BENCHLEDGER, "--url", url, "work", "--all", "--workers", "4", "--concurrency",
             "32", "--evaluator", "judge=benchledger.examples.model_api:evaluate"],
            env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        stats = server.stats()
    if completed.returncode != 0:
        raise RuntimeError(completed.stderr[-2000:])
    attempts, work = AttemptRow.__table__, WorkRow.__table__
    with database.engine.connect() as connection:
        succeeded = connection.execute(
            sa.select(attempts.c.campaign_id, attempts.c.finished_at).where(
                attempts.c.campaign_id.in_(campaign_ids), attempts.c.outcome == "succeeded"
            )
        ).all()
        charged = connection.execute(
            sa.select(sa.func.count()).where(
                work.c.campaign_id.in_(campaign_ids), work.c.attempts != 1
            )
        ).scalar_one()
    database.dispose()
    first = min(float(row.finished_at) for row in succeeded)
    window = [row for row in succeeded if float(row.finished_at) < first + SPAN]
    per_minute = len(window) / (SPAN / 60)
    shares = Counter(row.campaign_id for row in window)
    smallest = min(shares[cid] for cid in campaign_ids) / (len(window) / 3)
    elapsed = time.time() - started
    note = (
        f"{len(succeeded)} items in {elapsed:.0f} s; {stats.throttled} 429s; "
        f"max in flight {stats.max_in_flight} (cap 20); {charged} items with attempts != 1"
    )
    return [
        figure(
            f"{label}: 3 campaigns, one limit group, work --all 4x32, 100 ms model",
            "requests/min",
            per_minute,
            float(QUOTA),
            "the provider's quota",
            ">= 0.9x",
            note,
        ),
        figure(
            f"{label}: smallest campaign's share of those requests",
            "share",
            smallest,
            1.0,
            "an equal third",
            ">= 0.8x",
            ", ".join(f"{shares[cid]}" for cid in campaign_ids),
        ),
    ]


def figures() -> list[Figure]:
    rows: list[Figure] = []
    server = postgres_server()
    if server is not None:
        with postgres_database(server) as url:
            rows += _run("PostgreSQL", url)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-model-api-") as directory:
            rows += _run("SQLite", f"sqlite:///{Path(directory) / 'ledger.db'}")
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for row in figures():
        print(row)
