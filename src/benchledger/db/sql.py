"""The SQL helpers every repository and service shares.

``insert_if_absent`` (content-addressed rows), ``Prebuilt`` (a hot-path
statement compiled once per dialect), ``consistent_snapshot`` (one snapshot
for a multi-table read) and ``retry_lost_races`` (a whole transaction again
after it lost a race to another writer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import attrs
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Session

#: PostgreSQL serialization failure and deadlock: safe to run the whole transaction again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})

_T = TypeVar("_T")


def insert_if_absent(
    session: Session | sa.Connection,
    table: sa.Table | type[DeclarativeBase],
    values: dict[str, Any],
) -> bool:
    """``INSERT ... ON CONFLICT DO NOTHING`` (content-addressed rows); True when inserted."""
    statement: Any
    dialect = (
        session.get_bind().dialect.name if isinstance(session, Session) else session.dialect.name
    )
    if dialect == "postgresql":
        statement = postgresql.insert(table).values(**values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        statement = sqlite.insert(table).values(**values).on_conflict_do_nothing()
    else:  # pragma: no cover - only the two supported backends
        raise NotImplementedError(dialect)
    # SQLAlchemy 2.1 keeps an INSERT's rowcount only when asked (else PostgreSQL says -1).
    options = {"preserve_rowcount": True}
    result = cast(sa.CursorResult[Any], session.execute(statement, execution_options=options))
    return result.rowcount == 1


class Prebuilt:
    """A Core statement compiled once per dialect, then run with ``exec_driver_sql``.

    ``Connection.execute`` of even a cached statement walks the statement for its
    cache key, builds its parameters and sets up result processing, on every call:
    on the hot path that costs more than the database's own work. A prebuilt
    statement keeps, per dialect, the compiled SQL, the order of its parameters
    (positional drivers), the values of its constants and the bind processors
    of its types; a call only lays out the caller's values. Events
    (``before_cursor_execute``), error wrapping and transactions are the
    Connection's, as for any statement. Rows come back as the driver gives them
    (no result processing): use it for text, numbers and floats.
    """

    def __init__(self, statement: sa.Executable) -> None:
        self.statement = statement
        self._forms: dict[tuple[str, str], PrebuiltForm] = {}

    def __call__(
        self, connection: sa.Connection, parameters: dict[str, Any]
    ) -> sa.CursorResult[*tuple[Any, ...]]:
        form = self.form(connection.dialect)
        return connection.exec_driver_sql(form.sql, form.arguments(parameters))

    def many(self, connection: sa.Connection, parameters: list[dict[str, Any]]) -> None:
        """Run it once per set of ``parameters``, in one ``executemany`` (no rows back)."""
        form = self.form(connection.dialect)
        connection.exec_driver_sql(form.sql, [form.arguments(each) for each in parameters])

    def form(self, dialect: sa.Dialect) -> PrebuiltForm:
        """The statement as compiled for ``dialect`` (once; later calls reuse it)."""
        key = (dialect.name, dialect.driver)
        form = self._forms.get(key)
        if form is None:
            form = self._forms[key] = PrebuiltForm.compile(self.statement, dialect)
        return form


@attrs.frozen
class PrebuiltForm:
    """A statement's SQL for one dialect and how to lay out its parameters."""

    sql: str
    order: tuple[str, ...] | None  # positional drivers: the parameters' names in order
    constants: dict[str, Any]
    processors: tuple[tuple[str, Callable[[Any], Any]], ...]

    @classmethod
    def compile(cls, statement: sa.Executable, dialect: sa.Dialect) -> PrebuiltForm:
        compiled = cast(Any, statement).compile(dialect=dialect)
        if compiled.escaped_bind_names or "POSTCOMPILE" in compiled.string:
            raise NotImplementedError("a prebuilt statement takes plain bound parameters")
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        processors = []
        for name, bind in binds.items():
            process = bind.type.bind_processor(dialect)
            if process is not None:
                processors.append((name, process))
        return cls(
            sql=compiled.string,
            order=tuple(compiled.positiontup) if compiled.positional else None,
            constants={name: bind.value for name, bind in binds.items() if not bind.required},
            processors=tuple(processors),
        )

    def arguments(self, parameters: dict[str, Any]) -> Any:
        """The driver's parameters: the constants and ``parameters``, processed, in order."""
        values = {**self.constants, **parameters}
        for name, process in self.processors:
            values[name] = process(values[name])
        return values if self.order is None else tuple(values[name] for name in self.order)


def consistent_snapshot(session: Session) -> None:
    """Make the session's read transaction one snapshot (call before any statement).

    SQLite read transactions already are (WAL, deferred BEGIN). PostgreSQL's
    default READ COMMITTED takes a new snapshot per statement, so a read that
    looks at several tables uses REPEATABLE READ instead (reads never block writers).
    """
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def retry_lost_races(
    attempt: Callable[[], _T], *, attempts: int, collided: Callable[[], Exception]
) -> _T:
    """Run one whole transaction, ``attempt()``, again when it lost a race to another writer.

    A lost race is a unique violation (a concurrent writer inserted the same
    key or content first: the next attempt finds it and replays) or, on
    PostgreSQL, a serialization failure or deadlock. After ``attempts`` tries
    a collision raises ``collided()``; any other error propagates at once.
    """
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except sa.exc.IntegrityError:
            if number == attempts:
                raise collided() from None
        except sa.exc.OperationalError as error:
            if getattr(error.orig, "sqlstate", None) not in RETRYABLE_SQLSTATES:
                raise
            if number == attempts:
                raise
    raise AssertionError("unreachable")
