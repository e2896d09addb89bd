"""The stored state vocabularies are the domain's: every ``column IN (...)`` CHECK
constraint the migrations created allows exactly the values of its domain ``StrEnum``.

The models build their constraints from the enums; the migrations are frozen
text. A new state added to an enum without a revision (or the other way round)
fails here, on both backends.
"""

from __future__ import annotations

import re
from enum import StrEnum

import pytest
import sqlalchemy as sa

import benchledger.models  # noqa: F401  (registers every table)
from benchledger import Database
from benchledger.domain.campaign import ReportStatus, WorkStatus
from benchledger.models.base import Base

_QUOTED = re.compile(r"'([^']*)'")
_ONE_OF = re.compile(r"^\(*\s*(\w+)\s+(IN\s*\(|=\s*ANY\s*\()", re.IGNORECASE)


def _one_of_values(text: str) -> tuple[str, frozenset[str]] | None:
    """(column, allowed values) of a ``column IN (...)`` check, else None."""
    match = _ONE_OF.match(text.strip())
    if match is None:
        return None
    return match.group(1), frozenset(_QUOTED.findall(text))


def _model_checks() -> dict[tuple[str, str], frozenset[str]]:
    checks = {}
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            if isinstance(constraint, sa.CheckConstraint):
                found = _one_of_values(str(constraint.sqltext))
                if found is not None:
                    checks[(table.name, found[0])] = found[1]
    return checks


def _stored_checks(database: Database) -> dict[tuple[str, str], frozenset[str]]:
    inspector = sa.inspect(database.engine)
    checks = {}
    for table in Base.metadata.tables:
        for constraint in inspector.get_check_constraints(table):
            found = _one_of_values(constraint["sqltext"])
            if found is not None:
                checks[(table, found[0])] = found[1]
    return checks


@pytest.mark.parametrize(
    ("table", "column", "vocabulary"),
    [
        ("benchmark_campaign_work", "status", WorkStatus),
        ("benchmark_campaign_report_state", "status", ReportStatus),
    ],
)
def test_campaign_state_columns_allow_exactly_their_enum(
    table: str, column: str, vocabulary: type[StrEnum]
) -> None:
    assert _model_checks()[(table, column)] == frozenset(vocabulary)


def test_every_stored_state_check_allows_what_the_model_allows(ledger_db: Database) -> None:
    models = _model_checks()
    assert ("benchmark_campaign_work", "status") in models
    assert ("studies", "state") in models
    assert _stored_checks(ledger_db) == models
