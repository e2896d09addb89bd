#!/usr/bin/env python3
"""Dashboard latency on a 100,000-item campaign: every page and API call, goal < 300 ms.

The ledger holds a 100,000-item campaign part way through (60,000 succeeded
over the last hour, 5,000 failed under four error codes, 2,000 waiting to
retry, 500 leased, the rest pending), two small campaigns and a study. Each
route of the dashboard is requested through the real ASGI app (Starlette's
test client, in process: no network), warm, ``--repeat`` times; the median
is the figure, the slowest is in the note. The health check of the large campaign runs in the
dashboard's background thread meanwhile, as it does in production.

The reference, measured in the same run on the same database: the one
aggregate any status page needs, ``SELECT status, count(*) ... GROUP BY
status`` for the campaign, through the bare driver (sqlite3 / psycopg).

    .venv/bin/python benchmarks/bench_dashboard.py [--items 100000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _figures import Figure, figure, postgres_database, postgres_server, psycopg_dsn  # noqa: E402

from benchledger.db import Database  # noqa: E402
from benchledger.domain.campaign_plan import CampaignPolicy, Suite, SuiteCase  # noqa: E402
from benchledger.domain.canonical import canonical_json, sha256_text  # noqa: E402
from benchledger.services.campaigns import CampaignService  # noqa: E402

LOCALES = ("de-DE", "fr-FR", "ja-JP", "pt-BR")
GOAL = "< 300 ms"
CODES = ("example.timeout", "example.rate_limited", "example.locale_unsupported", "bench.x")


def _plan(items: int) -> tuple[CampaignPolicy, Suite]:
    cases = max(1, items // len(LOCALES))
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
        valid_until=4_102_444_800.0,
        candidate_provider_id="bench",
        candidate_model_id=f"model-{uuid.uuid4().hex[:8]}",
        candidate_model_version="1",
        candidate_software_version="1",
        candidate_glossary_version="1",
        candidate_policy_version="1",
    )
    return policy, suite


def _part_way(db: Database, campaign_id: str, now: float) -> None:
    """Set-up only (plain SQL): succeeded over the last hour, failures, retries, leases."""
    text = canonical_json({"score": 0.5, "setup": True})
    digest = sha256_text(text)
    with db.engine.begin() as connection:
        ids = [
            row[0]
            for row in connection.execute(
                sa.text(
                    "SELECT work_id FROM benchmark_campaign_work WHERE campaign_id = :c"
                    " ORDER BY target_locale, suite_case_key"
                ),
                {"c": campaign_id},
            )
        ]
        succeeded, failed = ids[:60_000], ids[60_000:65_000]
        retry, leased = ids[65_000:67_000], ids[67_000:67_500]
        update = sa.text(
            "UPDATE benchmark_campaign_work SET status = :s, attempts = :a,"
            " result_json = :rj, result_sha256 = :rh, updated_at = :u, next_attempt_at = :n,"
            " last_error_code = :e, lease_owner = :o, lease_token = :t, lease_expires_at = :x"
            " WHERE work_id = :w"
        )
        rows: list[dict[str, Any]] = []
        for index, work_id in enumerate(succeeded):
            at = now - 3600 + 3600 * index / max(1, len(succeeded))
            rows.append(
                dict(
                    s="succeeded",
                    a=1,
                    rj=text,
                    rh=digest,
                    u=at,
                    n=at,
                    e=None,
                    o=None,
                    t=None,
                    x=None,
                    w=work_id,
                )
            )
        for index, work_id in enumerate(failed):
            rows.append(
                dict(
                    s="failed",
                    a=3,
                    rj=None,
                    rh=None,
                    u=now - 60,
                    n=now - 60,
                    e=CODES[index % len(CODES)],
                    o=None,
                    t=None,
                    x=None,
                    w=work_id,
                )
            )
        for index, work_id in enumerate(retry):
            rows.append(
                dict(
                    s="retry_wait",
                    a=1,
                    rj=None,
                    rh=None,
                    u=now,
                    n=now + index,
                    e=CODES[0],
                    o=None,
                    t=None,
                    x=None,
                    w=work_id,
                )
            )
        for index, work_id in enumerate(leased):
            rows.append(
                dict(
                    s="leased",
                    a=1,
                    rj=None,
                    rh=None,
                    u=now,
                    n=now,
                    e=None,
                    o=f"worker-{index % 16}",
                    t=uuid.uuid4().hex,
                    x=now + 300 + index,
                    w=work_id,
                )
            )
        connection.execute(update, rows)
        if db.dialect_name == "postgresql":
            connection.exec_driver_sql("ANALYZE")


def _ledger(url: str, items: int) -> tuple[str, str]:
    """The ledger: a large campaign part way, two small ones, a study; (campaign, study)."""
    from benchledger.examples import study as ex
    from benchledger.services.studies import StudyService

    db = Database(url)
    db.upgrade()
    service = CampaignService(db)
    for small in (40, 400):
        service.create(*_plan(small))
    policy, suite = _plan(items)
    campaign_id = service.create(policy, suite)
    _part_way(db, campaign_id, time.time())
    studies = StudyService(db)
    owner = "olivia"
    studies.bootstrap_owner(owner)
    material = studies.register_material(
        owner, recipe={"lr": "3e-4"}, envelope=ex.ENVELOPE, trainer_id="bench-trainer"
    )
    study = studies.create(
        owner, name="bench", limits=ex.LIMITS, policy=ex.example_policy(), request_key="create-01"
    )
    studies.prepare_trial(
        owner, study.id, revision=1, material=material, replicate=1, request_key="trial-001"
    )
    studies.open_study(owner, study.id, revision=2, request_key="open-0001")
    db.dispose()
    return campaign_id, study.id


def _timings_ms(call: Callable[[], Any], repeat: int) -> list[float]:
    call()  # warm: templates compiled, plan cached, connections open
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def _reference(url: str, campaign_id: str) -> Callable[[], Any]:
    query = (
        "SELECT status, count(*) FROM benchmark_campaign_work"
        " WHERE campaign_id = {p} GROUP BY status"
    )
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(sa.make_url(url).database or "")
        return lambda: connection.execute(query.format(p="?"), (campaign_id,)).fetchall()
    import psycopg

    pg = psycopg.connect(psycopg_dsn(url), autocommit=True)
    return lambda: pg.execute(query.format(p="%s"), (campaign_id,)).fetchall()


def measure(url: str, backend: str, items: int, repeat: int) -> list[Figure]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from benchledger.dashboard import DashboardSettings, create_app

    campaign_id, study_id = _ledger(url, items)
    reference = statistics.median(_timings_ms(_reference(url, campaign_id), repeat))
    routes = [
        "/campaigns",
        "/api/campaigns",
        "/campaigns?order=newest",
        f"/campaigns/{campaign_id}",
        f"/api/campaigns/{campaign_id}",
        f"/api/campaigns/{campaign_id}/status",
        f"/api/campaigns/{campaign_id}/health",
        f"/api/campaigns/{campaign_id}/report",
        "/studies",
        "/api/studies",
        f"/studies/{study_id}",
        f"/api/studies/{study_id}",
        f"/api/studies/{study_id}/audit",
    ]
    rows = []
    with TestClient(create_app(url, DashboardSettings())) as client:
        for route in routes:
            status = client.get(route).status_code
            timings = _timings_ms(lambda route=route: client.get(route), repeat)
            shown = route.replace(campaign_id, "{big}").replace(study_id, "{study}")
            rows.append(
                figure(
                    f"{backend} GET {shown}",
                    "ms",
                    statistics.median(timings),
                    reference,
                    "bare GROUP BY status, same campaign",
                    GOAL,
                    f"{items:,} items; HTTP {status}; median of {repeat}, "
                    f"slowest {max(timings):.0f} ms",
                )
            )
    return rows


def figures(items: int = 100_000, repeat: int = 15) -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory() as directory:
        rows += measure(f"sqlite:///{Path(directory) / 'dash.db'}", "SQLite", items, repeat)
    server = postgres_server()
    if server is None:
        from _figures import skipped

        rows.append(
            skipped(
                "PostgreSQL dashboard routes",
                "ms",
                "bare GROUP BY status",
                GOAL,
                "no PostgreSQL server (BENCHLEDGER_TEST_PG_URL)",
            )
        )
    else:
        with postgres_database(server) as url:
            rows += measure(url, "PostgreSQL", items, repeat)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    from run_all import render

    print(render(figures(args.items, args.repeat)))


if __name__ == "__main__":
    main()
