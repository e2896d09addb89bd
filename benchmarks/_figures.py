"""The row every benchmark module reports, and the protocol `run_all.py` relies on.

A benchmark is a module ``benchmarks/bench_<name>.py`` with one function::

    def figures() -> list[Figure]: ...

Each row is one figure measured beside a reference taken in the same run (same
process or same machine, minutes apart at most), so the ratio is what to
compare across machines. Build rows with :func:`figure`; ``run_all.py`` prints
them as one table and writes them to ``benchmarks/results.json``.

The PostgreSQL server, when there is one, is named by ``BENCHLEDGER_TEST_PG_URL``
(``scripts/with-postgres.sh`` sets it); :func:`postgres_server` returns it or
None, and :func:`postgres_database` makes a throwaway database on it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypedDict

__all__ = [
    "Figure",
    "figure",
    "postgres_database",
    "postgres_server",
    "psycopg_dsn",
    "skipped",
]


class Figure(TypedDict):
    """One row of the table (the keys of benchmarks/results.json)."""

    figure: str  # what is measured, e.g. "SQLite claim -> complete, 10k items"
    unit: str  # unit of benchledger and reference, e.g. "ms/cycle", "items/s"
    benchledger: float | None  # benchledger's figure (None: not measured, see note)
    reference: float | None  # the reference's figure, measured in the same run
    reference_name: str  # what the reference is, e.g. "bare sqlite3 loop"
    ratio: float | None  # benchledger / reference (for rates: also benchledger / reference)
    goal: str  # the goal, e.g. "<= 1.5x", ">= 0.7x", "< 50 ms"
    note: str  # anything the reader needs: sizes, counts, why a figure is missing


def figure(
    name: str,
    unit: str,
    benchledger: float | None,
    reference: float | None,
    reference_name: str,
    goal: str,
    note: str = "",
    *,
    ratio: float | None = None,
) -> Figure:
    """A row; the ratio is benchledger / reference unless given explicitly.

    For a time (lower is better) a ratio of 2.0 means twice as slow as the
    reference; for a rate (higher is better) 0.5 means half the reference's
    rate. The goal says which way is good (``<= 1.5x``, ``>= 0.7x``).
    """
    if ratio is None and benchledger is not None and reference:
        ratio = benchledger / reference
    return Figure(
        figure=name,
        unit=unit,
        benchledger=benchledger,
        reference=reference,
        reference_name=reference_name,
        ratio=ratio,
        goal=goal,
        note=note,
    )


def skipped(name: str, unit: str, reference_name: str, goal: str, why: str) -> Figure:
    """A row for a figure that could not be measured in this run (e.g. no PostgreSQL)."""
    return figure(name, unit, None, None, reference_name, goal, f"not measured: {why}")


def postgres_server() -> str | None:
    """The PostgreSQL server URL of this run (``BENCHLEDGER_TEST_PG_URL``), or None."""
    return os.environ.get("BENCHLEDGER_TEST_PG_URL") or os.environ.get("BENCHLEDGER_TEST_URL")


@contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    """A throwaway database on the server (SQLAlchemy URL, psycopg driver), dropped after."""
    import sqlalchemy as sa

    from benchledger.db import resolve_url

    admin = sa.create_engine(resolve_url(server_url), isolation_level="AUTOCOMMIT")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield (
            sa.make_url(resolve_url(server_url))
            .set(database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def psycopg_dsn(url: str) -> str:
    """The libpq DSN of a SQLAlchemy URL, for the bare-driver references."""
    import sqlalchemy as sa

    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
