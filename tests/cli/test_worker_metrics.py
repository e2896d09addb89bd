"""A worker's own Prometheus metrics: ``campaign work --metrics-port`` in real processes,
and :class:`~benchledger.workers.metrics.WorkerMetrics` fed by real evaluators and a
real :class:`~benchledger.faults.Outage`."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from benchledger import Database
from benchledger.errors import DependencyFailed
from benchledger.examples import evaluator as example
from benchledger.faults import Outage, OutagePolicy
from benchledger.services.campaigns import CampaignService
from benchledger.workers.metrics import WorkerMetrics, serve_worker_metrics

from .helpers import ok, refused
from .test_campaign_commands import EVALUATOR, FAST, write_inputs

BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
    """The worker's metrics on ``port``, or None while nothing listens there yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return samples(answer.read().decode())
    except OSError:
        return None


def free_ports(count: int) -> int:
    """A first port with ``count`` free ports from it."""
    for _ in range(100):
        with socket.create_server(("127.0.0.1", 0)) as probe:
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        try:
            for offset in range(count):
                with socket.create_server(("127.0.0.1", first + offset)):
                    pass
        except OSError:
            continue
        return first
    raise AssertionError("no free ports")


def create(cli: Any, db: Database, tmp_path: Path, cases: int) -> str:
    policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=cases)
    created = cli(
        "campaign", "create", "--policy", str(policy_file), "--suite", str(suite_file),
        url=db.url,
    )  # fmt: skip
    return str(ok(created).stdout.strip())


@pytest.mark.slow
def test_each_worker_process_serves_metrics_that_move_while_it_runs(
    cli: Any, ledger_db: Database, tmp_path: Path
) -> None:
    campaign_id = create(cli, ledger_db, tmp_path, cases=40)
    port = free_ports(2)
    process = subprocess.Popen(
        [BENCHLEDGER, "--url", ledger_db.url, "campaign", "work", campaign_id, "--workers", "2",
         "--metrics-port", str(port), "--evaluator", EVALUATOR, "--no-progress", *FAST],
        env={**os.environ, example.WORK_MS_ENV: "150"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    cases = "benchledger_worker_cases_total", frozenset()
    try:
        seen: list[float] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(set(seen)) < 3:
            got = scrape(port)
            if got is not None and (not seen or got[cases] != seen[-1]):
                seen.append(got[cases])
            time.sleep(0.05)
        other = scrape(port + 1)  # the second worker process, on the next port
        os.killpg(process.pid, signal.SIGINT)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert len(set(seen)) >= 3 and seen == sorted(seen), (seen, err)
    assert other is not None and cases in other, err
    # Every case ran is counted once by its outcome and once in the histogram.
    assert got is not None
    outcomes = sum(v for (name, _), v in got.items() if name == "benchledger_worker_outcomes_total")
    assert outcomes == got[cases]
    assert got["benchledger_worker_case_duration_seconds_count", frozenset()] == got[cases]
    assert ("benchledger_worker_lanes_in_flight", frozenset()) in got
    assert ("benchledger_worker_outage_retries_total", frozenset()) in got
    assert process.returncode == 130, err


def lanes(metrics: WorkerMetrics) -> float | None:
    return metrics.registry.get_sample_value("benchledger_worker_lanes_in_flight")


def test_metered_evaluators_count_cases_outcomes_durations_and_lanes() -> None:
    metrics = WorkerMetrics()
    inside: list[float] = []

    def evaluate(claim: Any, heartbeat: Any) -> dict[str, Any]:
        inside.append(lanes(metrics))
        if claim == "bad":
            raise DependencyFailed("provider.timeout", retryable=True)
        if claim == "bug":
            raise KeyError("oops")
        return {"claim": claim}

    metered = metrics.metered(evaluate)
    assert metered("ok", None) == {"claim": "ok"}
    for claim, error in (("bad", DependencyFailed), ("bug", KeyError)):
        with pytest.raises(error):
            metered(claim, None)

    async def evaluate_async(claim: Any, heartbeat: Any) -> str:
        inside.append(lanes(metrics))
        await asyncio.sleep(0.01)
        return str(claim)

    metered_async = metrics.metered(evaluate_async)
    assert asyncio.iscoroutinefunction(metered_async)

    async def two_at_once() -> list[str]:
        return list(await asyncio.gather(metered_async("a", None), metered_async("b", None)))

    assert asyncio.run(two_at_once()) == ["a", "b"]
    got = samples(metrics.exposition().decode())
    assert got["benchledger_worker_cases_total", frozenset()] == 5
    outcome = "benchledger_worker_outcomes_total"
    assert got[outcome, frozenset({"outcome": "result", "code": ""}.items())] == 3
    timeout = frozenset({"outcome": "error", "code": "provider.timeout"}.items())
    assert got[outcome, timeout] == 1
    unexpected = frozenset({"outcome": "error", "code": "benchmark.campaign.unexpected"}.items())
    assert got[outcome, unexpected] == 1
    assert got["benchledger_worker_case_duration_seconds_count", frozenset()] == 5
    assert got["benchledger_worker_lanes_in_flight", frozenset()] == 0
    assert inside[:3] == [1, 1, 1] and sorted(inside[3:]) == [1, 2]  # both async in flight


def test_outage_retries_are_counted_from_the_workers_own_warnings() -> None:
    metrics = WorkerMetrics()
    handler = metrics.count_outage_retries()
    faults = iter([sa.exc.DisconnectionError("gone"), sa.exc.DisconnectionError("gone")])

    def flaky() -> str:
        error = next(faults, None)
        if error is not None:
            raise error
        return "answered"

    try:
        outage = Outage(OutagePolicy(budget_seconds=60), sleep=lambda _seconds: None)
        assert outage.call("status read", flaky) == "answered"  # two retries, then an answer
    finally:
        logging.getLogger("benchledger.faults").removeHandler(handler)
    got = samples(metrics.exposition().decode())
    assert got["benchledger_worker_outage_retries_total", frozenset()] == 2


def test_serve_worker_metrics_serves_its_own_registry_only() -> None:
    metrics = WorkerMetrics()
    metrics.finished(0.3, None)
    server = serve_worker_metrics(free_ports(1), metrics)
    try:
        got = scrape(server.port)
    finally:
        server.close()
    assert got is not None
    assert got["benchledger_worker_cases_total", frozenset()] == 1
    assert not any(name.startswith("python_") for name, _ in got)  # not the default registry


def test_a_taken_metrics_port_is_refused_before_anything_is_claimed(
    cli: Any, ledger_db: Database, tmp_path: Path
) -> None:
    campaign_id = create(cli, ledger_db, tmp_path, cases=2)
    port = free_ports(2)
    with socket.create_server(("127.0.0.1", port + 1)):  # worker process 1's port
        result = cli(
            "campaign", "work", campaign_id, "--workers", "2", "--metrics-port", str(port),
            "--evaluator", EVALUATOR, "--no-progress", *FAST, url=ledger_db.url,
        )  # fmt: skip
    line = refused(result, "ledger.cli.usage", exit_code=2)
    assert f"127.0.0.1:{port + 1}" in line
    counts = CampaignService(ledger_db).status(campaign_id).counts
    assert counts["pending"] == 8


def test_metrics_port_without_prometheus_client_says_what_to_install(
    cli: Any, ledger_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    campaign_id = create(cli, ledger_db, tmp_path, cases=1)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    result = cli(
        "campaign", "work", campaign_id, "--metrics-port", str(free_ports(1)),
        "--evaluator", EVALUATOR, url=ledger_db.url,
    )  # fmt: skip
    line = refused(result, "ledger.dashboard.not_installed")
    assert "pip install 'benchledger[dashboard]'" in line
    assert CampaignService(ledger_db).status(campaign_id).counts["pending"] == 4
