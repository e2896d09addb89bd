"""Adoption of SQLite files written by the legacy hand-written campaign store.

Such a file carries ``PRAGMA user_version`` 1, 2 or 3 and no Alembic version
table. Adoption verifies that its schema is exactly the legacy schema of that
version (tables, columns, types, constraints and indexes), then stamps the
matching revision so Alembic upgrades it from there. Anything else is refused
before a byte changes.
"""

from __future__ import annotations

import re
import sqlite3

import sqlalchemy as sa

from benchledger.domain.campaign_codes import SCHEMA_INVALID, SCHEMA_UNSUPPORTED
from benchledger.errors import SchemaError

# The legacy store's DDL, statement by statement, as it wrote each schema version.
_CAMPAIGNS = """
CREATE TABLE benchmark_campaigns (
    campaign_id TEXT PRIMARY KEY,
    policy_sha256 TEXT NOT NULL,
    suite_sha256 TEXT NOT NULL,
    work_count INTEGER NOT NULL CHECK (work_count > 0),
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
)"""
_WORK = """
CREATE TABLE benchmark_campaign_work (
    work_id TEXT PRIMARY KEY,
    campaign_id TEXT NOT NULL,
    target_locale TEXT NOT NULL,
    suite_case_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN {statuses}),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 20),
    next_attempt_at REAL NOT NULL,
    lease_owner TEXT,
    lease_token TEXT,
    lease_expires_at REAL,
    last_error_code TEXT,
    last_error_detail_hash TEXT,
    result_json TEXT,
    result_sha256 TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (campaign_id, target_locale, suite_case_key),
    FOREIGN KEY (campaign_id) REFERENCES benchmark_campaigns (campaign_id)
)"""
_READY_INDEX = """
CREATE INDEX benchmark_campaign_ready
ON benchmark_campaign_work
(campaign_id, status, next_attempt_at, target_locale, suite_case_key)"""
_REPORTS = """
CREATE TABLE benchmark_campaign_reports (
    campaign_id TEXT PRIMARY KEY,
    policy_sha256 TEXT NOT NULL,
    results_sha256 TEXT NOT NULL,
    report_json TEXT NOT NULL,
    report_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    FOREIGN KEY (campaign_id) REFERENCES benchmark_campaigns (campaign_id)
)"""
_REPORT_STATE = """
CREATE TABLE benchmark_campaign_report_state (
    campaign_id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN {statuses}),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL CHECK (
        max_attempts BETWEEN 1 AND 20
    ),
    next_attempt_at REAL NOT NULL,
    lease_owner TEXT,
    lease_token TEXT,
    lease_expires_at REAL,
    last_error_code TEXT,
    last_error_detail_hash TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    FOREIGN KEY (campaign_id) REFERENCES benchmark_campaigns (campaign_id)
)"""

_STATUSES = "('pending', 'leased', 'retry_wait', 'succeeded', 'failed')"
_WORK = _WORK.format(statuses=_STATUSES)
_REPORT_STATE = _REPORT_STATE.format(statuses=_STATUSES)

LEGACY_DDL: dict[int, tuple[str, ...]] = {
    1: (_CAMPAIGNS, _WORK, _READY_INDEX),
    2: (_CAMPAIGNS, _WORK, _READY_INDEX, _REPORTS),
    3: (_CAMPAIGNS, _WORK, _READY_INDEX, _REPORTS, _REPORT_STATE),
}

# The Alembic revision whose schema equals each legacy version.
LEGACY_REVISIONS = {1: "0001", 2: "0002", 3: "0003"}

# Every table benchledger has ever created; one of them without a version table
# means the database holds ledger data of unknown provenance.
_LEDGER_TABLE_PREFIXES = ("benchmark_", "study", "studies", "benchledger_")


def _normalized(sql: str) -> str:
    collapsed = re.sub(r"\s+", " ", sql.strip())
    return re.sub(r"\s*([(),])\s*", r"\1", collapsed).rstrip(";")


def _expected_objects(version: int) -> dict[tuple[str, str], str]:
    expected = {}
    for statement in LEGACY_DDL[version]:
        kind, name = re.match(r"\s*CREATE (TABLE|INDEX) (\w+)", statement).groups()  # type: ignore[union-attr]
        expected[(kind.lower(), name)] = _normalized(statement)
    return expected


def _observed_objects(connection: sa.Connection) -> dict[tuple[str, str], str]:
    rows = connection.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master "
        "WHERE type IN ('table', 'index', 'view', 'trigger') AND name NOT LIKE 'sqlite_%'"
    ).all()
    return {(row[0], row[1]): _normalized(row[2] or "") for row in rows}


def sqlite_user_version(connection: sa.Connection) -> int:
    return int(connection.exec_driver_sql("PRAGMA user_version").scalar_one())


def legacy_revision(connection: sa.Connection, version_table: str) -> str | None:
    """The revision to stamp on a legacy database, or ``None`` if it is not one.

    Raises :class:`SchemaError` (``benchmark.campaign.schema_invalid`` or
    ``...schema_unsupported``) for a database that holds ledger tables but is
    neither Alembic-managed nor an exact legacy schema. Reads only.
    """
    inspector = sa.inspect(connection)
    tables = set(inspector.get_table_names())
    if version_table in tables:
        return None
    ledger_tables = {t for t in tables if t.startswith(_LEDGER_TABLE_PREFIXES)}
    if connection.dialect.name != "sqlite":
        if ledger_tables:
            raise SchemaError(
                SCHEMA_INVALID, "ledger tables exist without benchledger's version table"
            )
        return None
    version = sqlite_user_version(connection)
    if version not in (0, *LEGACY_DDL):
        raise SchemaError(
            SCHEMA_UNSUPPORTED, f"PRAGMA user_version {version} is not a known legacy schema"
        )
    if version == 0:
        if ledger_tables:
            raise SchemaError(SCHEMA_INVALID, "ledger tables exist without a schema version")
        return None
    if _observed_objects(connection) != _expected_objects(version):
        raise SchemaError(
            SCHEMA_INVALID,
            f"the file says legacy schema v{version} but its tables, columns or indexes differ",
        )
    return LEGACY_REVISIONS[version]


def build_legacy_file(path: str, version: int) -> None:
    """Write an empty SQLite file in the legacy exact schema ``version`` (for tests and tools)."""
    with sqlite3.connect(path) as connection:
        for statement in LEGACY_DDL[version]:
            connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {int(version)}")
    connection.close()
