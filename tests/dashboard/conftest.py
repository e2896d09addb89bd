"""Fixtures of the dashboard tests; the helpers are in ``helpers.py``."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from benchledger.db import Database
from benchledger.testing.clock import LedgerClock

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from .helpers import client_for


@pytest.fixture
def client(ledger_db: Database, ledger_clock: LedgerClock) -> Iterator[TestClient]:
    with client_for(ledger_db, ledger_clock) as test_client:
        yield test_client
