"""The schema: Alembic's configuration, upgrade, downgrade and the head check.

Alembic is imported by the functions that use it: most callers never do.
:class:`benchledger.db.Database` hands these its engine and its migration
connection (``upgrade``, ``downgrade``, ``current_revision``,
``require_current_schema``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from benchledger.errors import SCHEMA_AHEAD, SCHEMA_BEHIND, SCHEMA_UNKNOWN, SchemaError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "benchledger_alembic_version"

# Any constant works; it only has to be the same in every process that upgrades.
_PG_MIGRATION_LOCK_KEY = 0x62656E63686C6467  # "benchldg"

#: Opens one transaction on a connection that holds the migration lock.
MigrationConnection = Callable[[], AbstractContextManager[sa.Connection]]


def migrations_dir() -> Path:
    """The Alembic script directory: inside the installed package, else the source tree."""
    package = Path(__file__).resolve().parents[1]  # benchledger/
    packaged = package / "_migrations"
    if (packaged / "env.py").is_file():
        return packaged
    source_tree = package.parents[1] / "migrations"  # src/benchledger -> the checkout
    if (source_tree / "env.py").is_file():
        return source_tree
    raise SchemaError(SCHEMA_UNKNOWN, "benchledger's migrations are missing from this install")


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_table", VERSION_TABLE)
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise SchemaError(SCHEMA_UNKNOWN, "benchledger has no migrations")
    return head


def lock_migrations(connection: sa.Connection) -> None:
    """Take the migration lock in ``connection``'s transaction.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: nothing more, the
    transaction began with ``BEGIN IMMEDIATE`` and holds the write lock.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(
            sa.text("SELECT pg_advisory_xact_lock(:key)"),
            {"key": _PG_MIGRATION_LOCK_KEY},
        )


def current_revision(engine: sa.Engine) -> str | None:
    """The database's Alembic revision (``None``: no benchledger schema yet)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def upgrade(engine: sa.Engine, migration_connection: MigrationConnection, revision: str) -> None:
    """Upgrade the schema to ``revision``, adopting a legacy database.

    A database a newer benchledger upgraded is refused with
    ``ledger.schema.ahead``, not Alembic's "can't locate revision".
    """
    from alembic import command

    _refuse_unknown_revision(engine)
    _run_alembic(migration_connection, command.upgrade, revision)


def downgrade(engine: sa.Engine, migration_connection: MigrationConnection, revision: str) -> None:
    """Downgrade the schema to ``revision`` (refused on a schema newer than this version)."""
    from alembic import command

    _refuse_unknown_revision(engine)
    _run_alembic(migration_connection, command.downgrade, revision)


def require_current_schema(engine: sa.Engine) -> None:
    """Refuse a schema behind or ahead of this version's head (``SchemaError``)."""
    current = current_revision(engine)
    head = head_revision()
    if current != head:
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(alembic_config())
        known = current is not None and _is_known_revision(script, current)
        if current is None or known:
            raise SchemaError(
                SCHEMA_BEHIND,
                f"the database schema is at {current or 'nothing'}, behind {head}: "
                "run `benchledger db upgrade`",
            )
        raise SchemaError(
            SCHEMA_AHEAD,
            f"the database schema is at {current}, newer than this benchledger "
            f"({head}): upgrade benchledger",
        )


def _refuse_unknown_revision(engine: sa.Engine) -> None:
    from alembic.script import ScriptDirectory

    current = current_revision(engine)
    script = ScriptDirectory.from_config(alembic_config())
    if current is not None and not _is_known_revision(script, current):
        raise SchemaError(
            SCHEMA_AHEAD,
            f"the database schema is at {current}, newer than this benchledger "
            f"({head_revision()}): upgrade benchledger",
        )


def _run_alembic(migration_connection: MigrationConnection, operation: Any, revision: str) -> None:
    config = alembic_config()
    with migration_connection() as connection:
        config.attributes["connection"] = connection
        operation(config, revision)


def _is_known_revision(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except Exception:
        return False
