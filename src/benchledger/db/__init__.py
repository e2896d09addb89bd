"""The database layer: ``Database``, the SQL helpers repositories share, engines, schema.

- :mod:`benchledger.db.database`: ``Database`` and ``current_session``;
- :mod:`benchledger.db.sql`: ``insert_if_absent``, ``Prebuilt``,
  ``consistent_snapshot``, ``retry_lost_races``;
- :mod:`benchledger.db.engine`: the URL, engine options, SQLite's and
  PostgreSQL's connection setup;
- :mod:`benchledger.db.schema`: Alembic's configuration, upgrade, downgrade and
  the head check.

It imports nothing from benchledger but :mod:`benchledger.errors` and
:mod:`benchledger.faults` (start-up checks ride out an outage).
"""

from benchledger.db.database import Database, current_session
from benchledger.db.engine import (
    DEFAULT_URL,
    MAX_POOL_SIZE,
    POSTGRES_PING_IDLE_SECONDS,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SUPPORTED,
    URL_ENV,
    engine_options,
    parse_url,
    ping_idle_connections,
    resolve_url,
)
from benchledger.db.schema import VERSION_TABLE, alembic_config, head_revision, migrations_dir
from benchledger.db.sql import (
    RETRYABLE_SQLSTATES,
    Prebuilt,
    PrebuiltForm,
    consistent_snapshot,
    insert_if_absent,
    retry_lost_races,
)

__all__ = [
    "DEFAULT_URL",
    "MAX_POOL_SIZE",
    "POSTGRES_PING_IDLE_SECONDS",
    "RETRYABLE_SQLSTATES",
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "SUPPORTED",
    "URL_ENV",
    "VERSION_TABLE",
    "Database",
    "Prebuilt",
    "PrebuiltForm",
    "alembic_config",
    "consistent_snapshot",
    "current_session",
    "engine_options",
    "head_revision",
    "insert_if_absent",
    "migrations_dir",
    "parse_url",
    "ping_idle_connections",
    "resolve_url",
    "retry_lost_races",
]
