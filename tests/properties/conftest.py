"""Helpers of the hostile-input tests: a full dump of the ledger, and the documented codes."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.errors import STUDY_STATUSES, LedgerError

from .hostile import short

_ERRORS_MD = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


_REFLECTED: dict[str, tuple[list[str], str | None]] = {}


def _tables(connection: sa.Connection, url: str) -> tuple[list[str], str | None]:
    """The database's tables (reflected once per database, so tables other code adds
    count too) and, on PostgreSQL, one query reading every row of all of them as text."""
    known = _REFLECTED.get(url)
    if known is None:
        metadata = sa.MetaData()
        metadata.reflect(connection)
        names = sorted(metadata.tables)
        quote = connection.dialect.identifier_preparer.quote
        union = None
        if connection.dialect.name == "postgresql":
            union = " UNION ALL ".join(
                f"SELECT '{name}', CAST(row_to_json(x) AS text) FROM {quote(name)} AS x"
                for name in names
            )
        known = _REFLECTED[url] = (names, union)
    return known


def dump(db: Database) -> dict[str, Counter[Any]]:
    """Every row of every table of the database, as a multiset per table."""
    with db.engine.connect() as connection:
        names, union = _tables(connection, db.url)
        rows: dict[str, Counter[Any]] = {name: Counter() for name in names}
        if union is not None:  # one round trip for everything
            for name, text in connection.exec_driver_sql(union):
                rows[name][text] += 1
            return rows
        quote = connection.dialect.identifier_preparer.quote
        for name in names:
            rows[name].update(
                tuple(row) for row in connection.exec_driver_sql(f"SELECT * FROM {quote(name)}")
            )
        return rows


def documented_codes() -> frozenset[str]:
    """Every code docs/errors.md documents (backticked names in its tables)."""
    text = _ERRORS_MD.read_text(encoding="utf-8")
    codes = set(re.findall(r"^\| `([a-z][a-z0-9_.<>-]*)`", text, flags=re.MULTILINE))
    return frozenset(codes | set(STUDY_STATUSES))


DOCUMENTED = documented_codes()


def assert_documented(error: LedgerError) -> None:
    """A refusal carries a code docs/errors.md documents (dependency codes by their prefix)."""
    assert error.code in DOCUMENTED, f"undocumented code {error.code!r}"


class Prober:
    """Calls with hostile arguments, each checked: a refusal is a documented
    ``LedgerError`` and leaves every table as it was; anything but a ``LedgerError``
    fails the test. One dump per call: the state after a refusal is the state
    before the next call."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.before = dump(db)
        self.refusals: dict[str, int] = {}
        self.accepted = 0

    def probe(self, call: Callable[..., Any], label: str, **arguments: Any) -> bool:
        """Whether ``call(**arguments)`` was accepted (``False``: refused, checked)."""
        try:
            call(**arguments)
        except LedgerError as error:
            assert_documented(error)
            assert dump(self.db) == self.before, f"{label} refused with {error.code} but wrote"
            self.refusals[error.code] = self.refusals.get(error.code, 0) + 1
            return False
        except Exception as error:  # the property: nothing but a LedgerError escapes
            shown = {key: short(value) for key, value in arguments.items()}
            raise AssertionError(
                f"{label}({shown}) raised {type(error).__name__}: {short(error)}"
            ) from error
        self.accepted += 1
        self.before = dump(self.db)
        return True
