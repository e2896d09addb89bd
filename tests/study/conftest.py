"""Fixtures of the study tests: the clock and a kit of actors over the study service.

The helpers they and the tests use are in ``helpers.py``; the refusal check is
the service layer's ``helpers.refused(db, code)``.
"""

from __future__ import annotations

import pytest

from benchledger.db import Database
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock

from .helpers import Kit


@pytest.fixture
def clock(ledger_clock: LedgerClock) -> LedgerClock:
    return ledger_clock


@pytest.fixture
def kit(ledger_db: Database, clock: LedgerClock, study_service: StudyService) -> Kit:
    return Kit(ledger_db, clock, study_service)  # study_service reads ledger_clock
