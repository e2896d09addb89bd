"""Helpers of the hostile-input tests: a full dump of the ledger, and the documented codes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.errors import STUDY_STATUSES, LedgerError

_ERRORS_MD = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the database (reflected, so new tables count too)."""
    metadata = sa.MetaData()
    with db.engine.connect() as connection:
        metadata.reflect(connection)
        return {
            name: sorted(
                (tuple(row) for row in connection.execute(sa.select(table))),
                key=repr,
            )
            for name, table in sorted(metadata.tables.items())
        }


def documented_codes() -> frozenset[str]:
    """Every code docs/errors.md documents (backticked names in its tables)."""
    text = _ERRORS_MD.read_text(encoding="utf-8")
    codes = set(re.findall(r"^\| `([a-z][a-z0-9_.<>-]*)`", text, flags=re.MULTILINE))
    return frozenset(codes | set(STUDY_STATUSES))


DOCUMENTED = documented_codes()


def assert_documented(error: LedgerError) -> None:
    """A refusal carries a code docs/errors.md documents (dependency codes by their prefix)."""
    assert error.code in DOCUMENTED, f"undocumented code {error.code!r}"
