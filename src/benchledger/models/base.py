"""Declarative base with a naming convention, so every constraint has a stable name."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase

# Names stay within PostgreSQL's 63-byte identifier limit for every table we own.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}

# Epoch seconds: REAL on SQLite (the legacy store's type), double precision elsewhere
# (PostgreSQL's REAL is a 4-byte float and would round timestamps to minutes).
EpochSeconds: sa.types.TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")


def one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK expression: ``column`` is one of ``values`` (a domain vocabulary's values)."""
    return f"{column} IN ({', '.join(repr(str(value)) for value in values)})"


class Base(DeclarativeBase):
    """Every table: constraint names by convention; ``str`` is TEXT, ``float`` epoch seconds."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {str: sa.Text(), float: EpochSeconds}
