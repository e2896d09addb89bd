"""Adoption of SQLite files written by the legacy hand-written store (user_version 1-3)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchledger import Database, SchemaError
from benchledger.db import head_revision
from benchledger.legacy import LEGACY_DDL, build_legacy_file
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory

DATA = Path(__file__).resolve().parents[1] / "data" / "legacy"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
REPO = Path(__file__).resolve().parents[2]
LEGACY_TABLES = {
    1: ("benchmark_campaigns", "benchmark_campaign_work"),
    2: ("benchmark_campaigns", "benchmark_campaign_work", "benchmark_campaign_reports"),
    3: (
        "benchmark_campaigns",
        "benchmark_campaign_work",
        "benchmark_campaign_reports",
        "benchmark_campaign_report_state",
    ),
}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def legacy_copy(tmp_path: Path, version: int) -> Path:
    target = tmp_path / f"v{version}.sqlite"
    shutil.copyfile(DATA / f"v{version}.sqlite", target)
    return target


def table_rows(path: Path, table: str, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Every row of ``table`` (only ``columns``: later revisions add columns of their own)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        if columns is None:
            columns = [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
        order = ", ".join(columns)
        return [tuple(row) for row in connection.execute(f"SELECT {order} FROM {table} ORDER BY 1")]


def column_names(path: Path, table: str) -> list[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]


def assert_adopted(original: Path, adopted: Path, version: int) -> None:
    manifest = MANIFEST["files"][f"v{version}.sqlite"]
    for table in LEGACY_TABLES[version]:
        # Every column of every row, value for value.
        assert column_names(adopted, table)[: len(column_names(original, table))] == (
            column_names(original, table)
        )
        original_columns = column_names(original, table)
        assert table_rows(adopted, table, original_columns) == table_rows(original, table), table
    with sqlite3.connect(adopted) as connection:
        connection.row_factory = sqlite3.Row
        work = {
            row["work_id"]: row
            for row in connection.execute("SELECT * FROM benchmark_campaign_work")
        }
        assert len(work) == manifest["tables"]["benchmark_campaign_work"]
        for expected in manifest["work"]:
            row = work[expected["work_id"]]
            for key in ("campaign_id", "target_locale", "suite_case_key", "status", "attempts"):
                assert row[key] == expected[key]
            assert row["result_sha256"] == expected["result_sha256"]
        state = [
            dict(row)
            for row in connection.execute(
                "SELECT * FROM benchmark_campaign_report_state ORDER BY campaign_id"
            )
        ]
        expected_state = manifest["expected_report_state_after_migration"]
        keys = set(expected_state[0]) if expected_state else set()
        assert [{k: v for k, v in row.items() if k in keys} for row in state] == expected_state
        # Columns of later revisions start at their defaults: no lease loss counted.
        assert all((row["lease_losses"], row["max_lease_losses"]) == (0, 10) for row in state)
        reports = {
            row["campaign_id"]: row
            for row in connection.execute("SELECT * FROM benchmark_campaign_reports")
        }
        for campaign in manifest["campaigns"]:
            expected_report = campaign["report"]
            if expected_report is None:
                assert campaign["campaign_id"] not in reports
            else:
                stored = reports[campaign["campaign_id"]]
                assert stored["results_sha256"] == expected_report["results_sha256"]
                assert stored["report_sha256"] == expected_report["report_sha256"]
                assert stored["created_at"] == expected_report["created_at"]


def test_sample_files_are_what_the_manifest_says() -> None:
    for version in (1, 2, 3):
        name = f"v{version}.sqlite"
        assert sha256_file(DATA / name) == MANIFEST["files"][name]["sha256"]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_legacy_ddl_builds_the_sample_files_schema(tmp_path: Path, version: int) -> None:
    built = tmp_path / "built.sqlite"
    build_legacy_file(str(built), version)
    query = "SELECT type, name, tbl_name FROM sqlite_master ORDER BY name"
    with sqlite3.connect(built) as ours, sqlite3.connect(DATA / f"v{version}.sqlite") as theirs:
        assert ours.execute(query).fetchall() == theirs.execute(query).fetchall()
        for table in LEGACY_TABLES[version]:
            info = f"PRAGMA table_info({table})"
            assert ours.execute(info).fetchall() == theirs.execute(info).fetchall()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_database_upgrade_adopts_each_legacy_version(tmp_path: Path, version: int) -> None:
    adopted = legacy_copy(tmp_path, version)
    database = Database(f"sqlite:///{adopted}")
    database.upgrade()
    assert database.current_revision() == head_revision()
    database.require_current_schema()
    database.dispose()
    assert_adopted(DATA / f"v{version}.sqlite", adopted, version)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_plain_alembic_upgrade_head_adopts_from_the_repo_root(tmp_path: Path, version: int) -> None:
    adopted = legacy_copy(tmp_path, version)
    environment = {**os.environ, "BENCHLEDGER_DATABASE_URL": f"sqlite:///{adopted}"}
    alembic = Path(sys.executable).with_name("alembic")
    completed = subprocess.run(
        [str(alembic), "upgrade", "head"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert Database(f"sqlite:///{adopted}").current_revision() == head_revision()
    assert_adopted(DATA / f"v{version}.sqlite", adopted, version)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_empty_legacy_files_built_from_ddl_are_adopted(tmp_path: Path, version: int) -> None:
    path = tmp_path / "empty.sqlite"
    build_legacy_file(str(path), version)
    database = Database(f"sqlite:///{path}")
    database.upgrade()
    assert database.current_revision() == head_revision()


def _drop_ready_index(connection: sqlite3.Connection) -> None:
    connection.execute("DROP INDEX benchmark_campaign_ready")


def _add_column(connection: sqlite3.Connection) -> None:
    connection.execute("ALTER TABLE benchmark_campaign_work ADD COLUMN note TEXT")


def _claim_a_later_version(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA user_version = 3")  # on a v2 file: no report state table


def _forget_the_version(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA user_version = 0")


def _add_foreign_table(connection: sqlite3.Connection) -> None:
    connection.execute("CREATE TABLE benchmark_extra (id INTEGER PRIMARY KEY)")


def _loosen_a_check(connection: sqlite3.Connection) -> None:
    connection.execute("DROP TABLE benchmark_campaign_report_state")
    statement = LEGACY_DDL[3][-1].replace("BETWEEN 1 AND 20", "BETWEEN 1 AND 99")
    connection.execute(statement)


MALFORMED = [
    (3, _drop_ready_index, "benchmark.campaign.schema_invalid"),
    (1, _add_column, "benchmark.campaign.schema_invalid"),
    (2, _claim_a_later_version, "benchmark.campaign.schema_invalid"),
    (3, _forget_the_version, "benchmark.campaign.schema_invalid"),
    (2, _add_foreign_table, "benchmark.campaign.schema_invalid"),
    (3, _loosen_a_check, "benchmark.campaign.schema_invalid"),
]


@pytest.mark.parametrize(("version", "damage", "code"), MALFORMED)
def test_malformed_legacy_files_are_refused_byte_identical(
    tmp_path: Path, version: int, damage: Any, code: str
) -> None:
    path = legacy_copy(tmp_path, version)
    with sqlite3.connect(path) as connection:
        damage(connection)
    connection.close()
    before = sha256_file(path)
    database = Database(f"sqlite:///{path}")
    with pytest.raises(SchemaError) as refused:
        database.upgrade()
    database.dispose()
    assert refused.value.code == code
    assert sha256_file(path) == before
    assert not Path(f"{path}-wal").exists()


@pytest.mark.parametrize("user_version", [4, 17, -1])
def test_unknown_user_versions_are_unsupported(tmp_path: Path, user_version: int) -> None:
    path = legacy_copy(tmp_path, 3)
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {user_version}")
    connection.close()
    before = sha256_file(path)
    with pytest.raises(SchemaError) as refused:
        Database(f"sqlite:///{path}").upgrade()
    assert refused.value.code == "benchmark.campaign.schema_unsupported"
    assert sha256_file(path) == before


def test_plain_alembic_refuses_a_malformed_file_without_changing_it(tmp_path: Path) -> None:
    path = legacy_copy(tmp_path, 3)
    with sqlite3.connect(path) as connection:
        _drop_ready_index(connection)
    connection.close()
    before = sha256_file(path)
    alembic = Path(sys.executable).with_name("alembic")
    completed = subprocess.run(
        [str(alembic), "-x", f"url=sqlite:///{path}", "upgrade", "head"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    assert "benchmark.campaign.schema_invalid" in completed.stderr
    assert sha256_file(path) == before


# -- adopted campaigns before and after they are registered ------------------------------


def _adopted_service(tmp_path: Path, version: int) -> tuple[Database, CampaignService]:
    path = legacy_copy(tmp_path, version)
    database = Database(f"sqlite:///{path}")
    database.upgrade()
    later = MANIFEST["files"][f"v{version}.sqlite"]["max_stored_timestamp"] + 60
    return database, CampaignService(database, clock=lambda: later)


def _kinds(report: Any) -> set[str]:
    return {str(problem.kind) for problem in report.problems}


@pytest.mark.parametrize("version", [1, 2, 3])
def test_health_of_an_unregistered_adopted_campaign_counts_its_rows(
    tmp_path: Path, version: int
) -> None:
    database, service = _adopted_service(tmp_path, version)
    try:
        for campaign in MANIFEST["files"][f"v{version}.sqlite"]["campaigns"]:
            health = service.health(campaign["campaign_id"])
            assert health.status == "blocked"
            assert dict(health.counts) == campaign["status_counts"]
            assert health.work_count == campaign["work_count"]
            expected = {"benchmark.campaign.policy_unregistered"}
            if campaign["report"] is not None:
                expected.add("benchmark.campaign.report_unverifiable")
            assert set(health.reasons) == expected
    finally:
        database.dispose()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_verify_of_an_unregistered_adopted_campaign_calls_its_report_unverifiable(
    tmp_path: Path, version: int
) -> None:
    """Not report_state_invalid or report_invalid: nothing is wrong with a complete
    legacy campaign's report; there is only nothing to verify it against yet."""
    database, service = _adopted_service(tmp_path, version)
    try:
        for campaign in MANIFEST["files"][f"v{version}.sqlite"]["campaigns"]:
            report = service.verify(campaign["campaign_id"])
            expected = {"policy_unregistered"}
            if campaign["report"] is not None:
                expected.add("report_unverifiable")
            assert _kinds(report) == expected, campaign["role"]
            if campaign["report"] is not None:
                assert "benchmark.campaign.report_unverifiable" in report.reasons
    finally:
        database.dispose()


def _result(claim: Any) -> dict[str, Any]:
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.8,
    }


def test_adoption_then_register_then_verify(tmp_path: Path) -> None:
    """The walk of docs/operations.md: a legacy file whose campaign finished with its
    report is adopted (unverifiable, counted), registered, then verified in full."""
    suite = SuiteFactory(
        cases=[SuiteCaseFactory(key=f"case-{i:04d}", source_id=f"source/{i}") for i in range(3)]
    )
    policy = CampaignPolicyFactory(suite=suite, required_locales=("de-DE", "fr-FR"))
    clock = LedgerClock()
    # The campaign as the legacy store would have left it: finished, its report stored.
    source_path = tmp_path / "source.sqlite"
    source = Database(f"sqlite:///{source_path}")
    source.upgrade()
    campaigns = CampaignService(source, clock=clock)
    cid = campaigns.create(policy, suite, max_attempts=3)
    while (claim := campaigns.claim(cid, "w-1")) is not None:
        campaigns.complete(claim, _result(claim))
    report = campaigns.summarize(cid)
    source.dispose()
    legacy = tmp_path / "legacy.sqlite"
    build_legacy_file(str(legacy), 3)
    with sqlite3.connect(legacy) as connection:
        connection.execute("ATTACH DATABASE ? AS source", (str(source_path),))
        for table in LEGACY_TABLES[3]:
            columns = ", ".join(column_names(legacy, table))
            connection.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} FROM source.{table}"
            )
    connection.close()

    database = Database(f"sqlite:///{legacy}")
    try:
        database.upgrade()
        service = CampaignService(database, clock=clock)
        health = service.health(cid)
        assert dict(health.counts)["succeeded"] == health.work_count == 6
        assert health.reasons == (
            "benchmark.campaign.policy_unregistered",
            "benchmark.campaign.report_unverifiable",
        )
        assert _kinds(service.verify(cid)) == {"policy_unregistered", "report_unverifiable"}
        assert service.register(policy, suite) == cid
        audit = service.verify(cid)
        assert audit.ok, audit.as_payload()
        assert service.load_report(cid) == report
        health = service.health(cid)
        assert (health.status, health.report_ready, health.verified_ok) == ("healthy", True, True)
    finally:
        database.dispose()
