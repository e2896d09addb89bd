"""``campaign work`` on a campaign with nothing left to do: it says so at once, starting no
worker process and claiming nothing (exit 0 when finished, 1 when blocked for good)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import benchledger.workpool
from benchledger import Database
from benchledger.services.campaigns import CampaignService

from .helpers import ok, refused
from .test_campaign_commands import EVALUATOR, FAST, write_inputs


def create(cli: Any, db: Database, directory: Path, cases: int) -> str:
    directory.mkdir(exist_ok=True)
    policy_file, suite_file, _, _ = write_inputs(directory, cases=cases)
    created = cli(
        "campaign", "create", "--policy", str(policy_file), "--suite", str(suite_file),
        url=db.url,
    )  # fmt: skip
    return str(ok(created).stdout.strip())


def test_work_on_a_finished_or_blocked_campaign_starts_no_process(
    cli: Any, ledger_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished = create(cli, ledger_db, tmp_path, cases=2)
    ok(cli("campaign", "work", finished, "--evaluator", EVALUATOR, *FAST, url=ledger_db.url))
    blocked = create(cli, ledger_db, tmp_path / "blocked", cases=1)
    service = CampaignService(ledger_db)
    while (claim := service.claim(blocked, "w")) is not None:
        service.fail(claim, "test.broken", retryable=False)
    pools: list[Any] = []
    monkeypatch.setattr(benchledger.workpool, "run_pool", lambda *a, **k: pools.append(a))

    again = ok(cli("campaign", "work", finished, "--evaluator", EVALUATOR, url=ledger_db.url))
    last = again.stderr.splitlines()[-1]
    assert "; report succeeded (0 attempts finished in " in last, again.stderr
    assert last.endswith("; finished"), again.stderr
    result = cli("campaign", "work", blocked, "--evaluator", EVALUATOR, url=ledger_db.url)
    line = refused(result, "benchmark.campaign.failed", after_progress=True)
    assert "4 item(s) failed for good" in line
    assert "blocked for good, nothing to work" in result.stderr
    assert pools == []
