"""Fixtures of the hostile-input tests; the helpers are in ``helpers.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchledger.db import Database

from .helpers import Prober


@pytest.fixture
def prober(ledger_db: Database) -> Iterator[Prober]:
    with Prober(ledger_db) as probing:
        yield probing
