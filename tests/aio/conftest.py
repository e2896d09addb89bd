"""Fixtures for the asyncio API: the same campaign service, sync or awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger.aio import AsyncCampaignService, AsyncDatabase
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock


class Awaited:
    """AsyncCampaignService driven from a sync test: each call awaited on one event loop."""

    def __init__(self, runner: asyncio.Runner, service: AsyncCampaignService) -> None:
        self.runner = runner
        self.service = service

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.service, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.runner.run(method(*args, **kwargs))

        return call


@pytest.fixture
def loop_runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture
def async_db(ledger_db: Database, loop_runner: asyncio.Runner) -> Iterator[AsyncDatabase]:
    """An AsyncDatabase on the test's database (used on ``loop_runner``'s loop)."""
    database = AsyncDatabase(ledger_db.url)
    yield database
    loop_runner.run(database.dispose())


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ledger(
    flavor: str,
    ledger_db: Database,
    ledger_clock: LedgerClock,
    request: pytest.FixtureRequest,
) -> Any:
    """CampaignService, or AsyncCampaignService awaited call by call: the same interface."""
    if flavor == "sync":
        return CampaignService(ledger_db, clock=ledger_clock)
    runner: asyncio.Runner = request.getfixturevalue("loop_runner")
    database: AsyncDatabase = request.getfixturevalue("async_db")
    return Awaited(runner, AsyncCampaignService(database, clock=ledger_clock))


def count_rows(db: Database, sql: str, **params: Any) -> int:
    with db.engine.connect() as connection:
        return int(connection.execute(sa.text(sql), params).scalar_one())
