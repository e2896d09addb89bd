"""Alembic environment for benchledger.

Runs every upgrade in one transaction that holds the migration lock (see
``Database.migration_connection``), adopts a legacy campaign-store file first, and
keeps its version in ``benchledger_alembic_version`` so the ledger can share a
database with another Alembic application.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

import benchledger.models  # noqa: F401  (registers every table for autogenerate)
from benchledger.db import URL_ENV, VERSION_TABLE, Database, resolve_url
from benchledger.legacy import legacy_revision
from benchledger.models.base import Base
from benchledger.models.campaign import EXPRESSION_INDEXES, SQLITE_ONLY_CONSTRAINTS

config = context.config

# Run by the `alembic` command, the config comes from alembic.ini: apply its logging
# section (Alembic's "Running upgrade ..." lines). The library (Database.upgrade)
# builds its config in memory, without a file, and leaves the host's logging alone.
if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _include_object(dialect: str) -> Callable[[object, str | None, str, bool, object], bool]:
    def include(
        obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
    ) -> bool:
        # Another application's tables may live in the same database: ignore them. Indexes
        # on expressions are the migrations' own (autogenerate cannot compare them), and so
        # is a SQLite-only constraint elsewhere.
        if type_ == "index" and name in EXPRESSION_INDEXES:
            return False
        if type_ == "unique_constraint" and name in SQLITE_ONLY_CONSTRAINTS:
            return dialect == "sqlite"
        return not (type_ == "table" and reflected and compare_to is None)

    return include


def _configure(dialect: str, **kwargs: object) -> None:
    context.configure(
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_object=_include_object(dialect),
        compare_type=True,
        **kwargs,  # type: ignore[arg-type]
    )


def _migrate(connection: sa.Connection) -> None:
    adopt_at = legacy_revision(connection, VERSION_TABLE)
    dialect = connection.dialect.name
    _configure(dialect, connection=connection, render_as_batch=dialect == "sqlite")
    with context.begin_transaction():
        if adopt_at is not None:
            context.get_context().stamp(context.script, adopt_at)
        context.run_migrations()


def _url() -> str:
    explicit = context.get_x_argument(as_dictionary=True).get("url")
    return resolve_url(
        explicit or os.environ.get(URL_ENV) or config.get_main_option("sqlalchemy.url")
    )


def run_migrations_offline() -> None:
    url = _url()
    _configure(sa.make_url(url).get_backend_name(), url=url, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # Database.upgrade() holds the lock and the transaction
        _migrate(connection)
        return
    database = Database(_url())
    try:
        with database.migration_connection() as connection:
            _migrate(connection)
    finally:
        database.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
