"""Start-up rides out a database outage within a budget, then ends in a coded error.

``CampaignService(db)``, ``StudyService(db)``, ``AsyncCampaignService.ready()``,
``Database.upgrade()`` and ``Database.require_current_schema()`` read the schema
revision: while the database is down or restarting they retry (a few seconds by
default, :data:`~benchledger.faults.STARTUP_OUTAGE`; a worker's whole budget when a
worker starts them), and raise ``ledger.database.unavailable`` once it is spent:
never a raw SQLAlchemy error.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import benchledger as bl
from benchledger.aio import AsyncCampaignService, AsyncDatabase
from benchledger.db import Database
from benchledger.errors import DATABASE_UNAVAILABLE, LedgerError
from benchledger.faults import STARTUP_OUTAGE, DatabaseUnavailable, Outage, OutagePolicy
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService

#: Nothing listens on port 1: every connection is refused (a server that is down).
DOWN = "postgresql+psycopg://postgres@127.0.0.1:1/ledger"
QUICK = OutagePolicy(budget_seconds=0.4, base_delay=0.02, max_delay=0.05)


class FakeTime:
    """An outage's clock and sleep: each wait moves time on, instantly."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_the_start_up_default_is_seconds_not_a_workers_five_minutes() -> None:
    assert 1 <= STARTUP_OUTAGE.budget_seconds <= 30
    assert OutagePolicy().budget_seconds == 300  # what workers start with


@pytest.mark.parametrize(
    "start",
    [
        lambda db, outage: CampaignService(db, outage=outage),
        lambda db, outage: StudyService(db, outage=outage),
        lambda db, outage: db.upgrade(outage=outage),
        lambda db, outage: db.require_current_schema(outage=outage),
    ],
    ids=["CampaignService", "StudyService", "upgrade", "require_current_schema"],
)
def test_a_server_that_stays_down_is_a_coded_error_after_the_budget(start: object) -> None:
    db = Database(DOWN)
    clock = FakeTime()
    outage = Outage(STARTUP_OUTAGE, sleep=clock.sleep, monotonic=clock.monotonic)
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            start(db, outage)  # type: ignore[operator]
    finally:
        db.dispose()
    assert caught.value.code == DATABASE_UNAVAILABLE
    assert len(clock.waits) > 3  # it retried...
    assert clock.now == pytest.approx(STARTUP_OUTAGE.budget_seconds)  # ...for the budget


def test_the_issue_repro_ends_in_a_coded_error() -> None:
    """``CampaignService(Database(<down>))`` with no outage given: the default budget."""
    code = (
        "import benchledger as bl, logging; logging.disable(logging.WARNING)\n"
        f"try: bl.CampaignService(bl.Database({DOWN!r}))\n"
        "except bl.LedgerError as e: print(e.code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.strip() == DATABASE_UNAVAILABLE, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_async_ready_rides_the_outage_given_then_codes_it() -> None:
    async def main() -> None:
        database = AsyncDatabase(DOWN)
        try:
            await AsyncCampaignService(database).ready(outage=QUICK)
        finally:
            await database.dispose()

    with pytest.raises(LedgerError) as caught:
        asyncio.run(main())
    assert caught.value.code == DATABASE_UNAVAILABLE


def test_a_database_that_comes_back_within_the_budget_is_used(tmp_path: Path) -> None:
    """The ledger's directory appears (and is upgraded) while the service starts."""
    folder = tmp_path / "not-yet"
    url = f"sqlite:///{folder / 'ledger.db'}"
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:  # the operator's fix lands during the second wait
            folder.mkdir()
            fixed = Database(url)
            fixed.upgrade()
            fixed.dispose()

    db = Database(url)
    try:
        outage = Outage(QUICK, sleep=sleep)
        service = CampaignService(db, outage=outage)
        assert isinstance(service, bl.CampaignService) and not outage.ongoing
        assert outage.faults == 2
    finally:
        db.dispose()


def test_a_schema_behind_is_not_waited_for(tmp_path: Path) -> None:
    """Only outages are retried: a schema behind is refused at once with its code."""
    db = Database(f"sqlite:///{tmp_path / 'empty.db'}")
    outage = Outage(QUICK, sleep=lambda _s: pytest.fail("waited"))
    try:
        with pytest.raises(LedgerError) as caught:
            CampaignService(db, outage=outage)
    finally:
        db.dispose()
    assert caught.value.code == "ledger.schema.behind" and outage.faults == 0
