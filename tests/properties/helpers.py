"""Helpers of the hostile-input tests: a full dump of the ledger, the documented codes, and
the prober that checks every call."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.errors import STUDY_STATUSES, LedgerError

from .hostile import FOCUSED_NAMES, focused_for, name_of, parameters, short

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


def dump(db: Database, connection: sa.Connection | None = None) -> dict[str, Counter[Any]]:
    """Every row of every table of the database, as a multiset per table.

    Read through the driver's own cursor, on ``connection`` when given (kept
    open by a :class:`Prober`); the read transaction ends before returning, so
    the next dump sees every later commit.
    """
    if connection is None:
        with db.engine.connect() as own:
            return dump(db, own)
    names, union = _tables(connection, db.url)
    rows: dict[str, Counter[Any]] = {name: Counter() for name in names}
    cursor = connection.connection.cursor()
    try:
        if union is not None:  # PostgreSQL: one round trip for everything
            cursor.execute(union)
            for name, text in cursor.fetchall():
                rows[name][text] += 1
            return rows
        quote = connection.dialect.identifier_preparer.quote
        for name in names:
            cursor.execute(f"SELECT * FROM {quote(name)}")
            rows[name].update(tuple(row) for row in cursor.fetchall())
        return rows
    finally:
        cursor.close()
        connection.rollback()


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
    fails the test. One dump per call (the state after a refusal is the state
    before the next call), on a connection of its own: use it as a context manager.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.connection = db.engine.connect()
        self.before: dict[str, Counter[Any]] | None = None  # read at the first probe
        self.refusals: dict[str, int] = {}
        self.accepted = 0

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.connection.close()

    def dump(self) -> dict[str, Counter[Any]]:
        return dump(self.db, self.connection)

    def probe(self, call: Callable[..., Any], label: str, **arguments: Any) -> bool:
        """Whether ``call(**arguments)`` was accepted (``False``: refused, checked)."""
        if self.before is None:
            self.before = self.dump()
        try:
            call(**arguments)
        except LedgerError as error:
            assert_documented(error)
            assert self.dump() == self.before, f"{label} refused with {error.code} but wrote"
            self.refusals[error.code] = self.refusals.get(error.code, 0) + 1
            return False
        except Exception as error:  # the property: nothing but a LedgerError escapes
            shown = {key: short(value) for key, value in arguments.items()}
            raise AssertionError(
                f"{label}({shown}) raised {type(error).__name__}: {short(error)}"
            ) from error
        self.accepted += 1
        self.before = self.dump()
        return True


def probe_every_parameter(
    prober: Prober,
    methods: Mapping[str, Callable[..., Any]],
    valid_of: Callable[[str], Mapping[str, Callable[[], Any]]],
    call_of: Callable[[str], Callable[..., Any]],
    backend: str,
    accepts: Mapping[str, frozenset[str]],
) -> None:
    """Every parameter of every method meets every focused hostile value, the other
    arguments valid (``valid_of(name)``: a maker per parameter name); each call probed.

    A value ``accepts["method[parameter]"]`` does not list by name must be refused.
    """
    for name, function in sorted(methods.items()):
        valid = valid_of(name)
        for parameter in parameters(function):
            label = f"{name}[{parameter.name}]"
            for value in focused_for(backend):
                arguments = {
                    p.name: valid[p.name]() for p in parameters(function) if p.name in valid
                }
                arguments[parameter.name] = value
                accepted = prober.probe(call_of(name), label, **arguments)
                hostile = name_of(value)
                assert not accepted or hostile in accepts.get(label, ()), (
                    f"{label} accepted {hostile}: it must be refused"
                )


def refused_by(accepts: Mapping[str, frozenset[str]]) -> Callable[[str, str], list[str]]:
    """``(method, parameter) ->`` the focused values that parameter must refuse."""

    def refused(method: str, parameter: str) -> list[str]:
        allowed = accepts.get(f"{method}[{parameter}]", frozenset())
        return [name for name in FOCUSED_NAMES if name not in allowed]

    return refused
