"""Outage.acall: asyncio code rides out database faults with the same rules as Outage.call."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.aio import AsyncCampaignService, AsyncDatabase
from benchledger.db import Database
from benchledger.errors import DATABASE_UNAVAILABLE, LedgerError
from benchledger.faults import Outage, OutagePolicy
from benchledger.services.campaigns import CampaignService

POLICY = OutagePolicy(budget_seconds=0.6, base_delay=0.05, max_delay=0.1)


def test_acall_waits_for_the_database_and_then_goes_on(tmp_path: Path) -> None:
    """The ledger's directory appears (and is upgraded) while a worker starts up."""
    folder = tmp_path / "not-yet"
    url = f"sqlite:///{folder / 'ledger.db'}"
    waits: list[float] = []

    async def asleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:  # the operator's fix lands during the second wait
            folder.mkdir()
            database = Database(url)
            database.upgrade()
            database.dispose()
        await asyncio.sleep(seconds)

    async def main() -> CampaignService:
        database = AsyncDatabase(url)
        try:
            outage = Outage(POLICY, asleep=asleep)
            # ready() rides the outage given out itself, awaiting its waits.
            service = await AsyncCampaignService(database).ready(outage=outage)
            assert outage.faults == 2 and not outage.ongoing
            return service
        finally:
            await database.dispose()

    assert isinstance(asyncio.run(main()), CampaignService)
    assert len(waits) == 2 and all(0 < wait <= POLICY.max_delay for wait in waits)


def test_acall_gives_up_after_the_budget_with_a_code(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'ledger.db'}"

    async def main() -> None:
        database = AsyncDatabase(url)
        try:
            await AsyncCampaignService(database).ready(outage=POLICY)
        finally:
            await database.dispose()

    with pytest.raises(LedgerError) as caught:
        asyncio.run(main())
    assert caught.value.code == DATABASE_UNAVAILABLE


def test_acall_does_not_retry_what_is_not_a_fault(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"  # a file, but no schema: behind, not a fault
    calls = 0

    async def main() -> None:
        nonlocal calls
        database = AsyncDatabase(url)
        service = AsyncCampaignService(database)

        async def ready() -> CampaignService:
            nonlocal calls
            calls += 1
            return await service.ready(outage=POLICY)

        try:
            await ready()
        finally:
            await database.dispose()

    with pytest.raises(LedgerError) as caught:
        asyncio.run(main())
    assert caught.value.code == "ledger.schema.behind" and calls == 1


def test_an_async_worker_rides_out_terminated_sessions(
    ledger_db: Database, ledger_backend: str
) -> None:
    """PostgreSQL ends every session of the ledger mid-run: no case fails, none is lost."""
    if ledger_backend != "postgresql":
        pytest.skip("pg_terminate_backend")
    import sqlalchemy as sa

    from campaign.helpers import make_plan

    from .test_workers import rows, run

    plan = make_plan(cases=16, locales=("de-DE", "fr-FR"))  # 32 items
    service = CampaignService(ledger_db)
    cid = service.create(plan.policy, plan.suite, max_attempts=3)
    terminated: list[int] = []

    def terminate_every_session() -> None:
        with ledger_db.engine.connect() as connection:
            ended = connection.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        terminated.append(int(ended))

    started = 0

    def behave(claim: object) -> tuple[float, BaseException | None]:
        nonlocal started
        started += 1
        if started in (8, 20):
            terminate_every_session()  # the worker's pool, mid-run, twice
        return 0.2, None

    summary = run("asyncio", ledger_db, cid, behave, concurrency=8, until_finished=True)
    assert terminated and max(terminated) >= 1
    final = rows(ledger_db, cid)
    assert {row.status for row in final} == {"succeeded"} and len(final) == 32
    assert max(row.attempts for row in final) <= 3
    assert summary.failed == 0 and summary.report is not None


def test_a_failed_sqlite_connect_waits_for_its_thread(tmp_path: Path) -> None:
    """aiosqlite's thread for a connection that could not open has stopped before the
    loop closes: it never answers a closed loop ("Event loop is closed")."""
    url = f"sqlite:///{tmp_path / 'missing' / 'ledger.db'}"
    failures: list[threading.ExceptHookArgs] = []
    before = set(threading.enumerate())

    async def main() -> None:
        database = AsyncDatabase(url)
        try:
            with pytest.raises(sa.exc.OperationalError):
                async with database.async_engine.connect():
                    pass
        finally:
            await database.dispose()

    hook, threading.excepthook = threading.excepthook, failures.append
    try:
        asyncio.run(main())
        for thread in set(threading.enumerate()) - before:
            thread.join(5)
    finally:
        threading.excepthook = hook
    assert failures == []
