"""Alembic revisions: one head, upgrade from empty, round trips, models match, locking."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import benchledger.models  # noqa: F401  (registers every table)
from benchledger import Database, SchemaError
from benchledger.db import VERSION_TABLE, alembic_config, head_revision
from benchledger.errors import SCHEMA_AHEAD, SCHEMA_BEHIND
from benchledger.models.base import Base
from benchledger.models.campaign import EXPRESSION_INDEXES, SQLITE_ONLY_CONSTRAINTS


def _ours(dialect: str) -> Any:
    def include(obj: Any, name: Any, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ == "index" and name in EXPRESSION_INDEXES:
            return False  # test_revision_0015_one_index_keeps_items_unique_and_in_order
        if type_ == "unique_constraint" and name in SQLITE_ONLY_CONSTRAINTS:
            return dialect == "sqlite"
        return not (type_ == "table" and reflected and compare_to is None)

    return include


def schema_differences(database: Database) -> list[Any]:
    with database.engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "include_object": _ours(connection.dialect.name),
                "version_table": VERSION_TABLE,
            },
        )
        return list(compare_metadata(context, Base.metadata))


def test_there_is_exactly_one_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1
    assert script.get_current_head() == head_revision()


def test_revision_files_are_numbered_in_order() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    chain = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    assert chain[:4] == ["0001", "0002", "0003", "0004"]
    assert chain == sorted(chain)
    for rev in script.walk_revisions():
        assert rev.module.__file__ is not None
        assert rev.module.__file__.split("/")[-1].startswith(rev.revision + "_")


def test_upgrade_from_empty_reaches_head(ledger_empty_db: Database) -> None:
    assert ledger_empty_db.current_revision() is None
    ledger_empty_db.upgrade()
    assert ledger_empty_db.current_revision() == head_revision()
    ledger_empty_db.require_current_schema()


def test_models_match_the_migrated_schema(ledger_db: Database) -> None:
    assert schema_differences(ledger_db) == []


def test_upgrade_at_head_is_a_no_op(ledger_db: Database) -> None:
    before = sa.inspect(ledger_db.engine).get_table_names()
    ledger_db.upgrade()
    assert ledger_db.current_revision() == head_revision()
    assert sa.inspect(ledger_db.engine).get_table_names() == before


def test_every_step_downgrades_and_upgrades_again(ledger_db: Database) -> None:
    script = ScriptDirectory.from_config(alembic_config())
    revisions = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    for target in reversed(revisions[:-1]):
        ledger_db.downgrade(target)
        assert ledger_db.current_revision() == target
    ledger_db.downgrade("base")
    assert ledger_db.current_revision() is None
    leftover = set(sa.inspect(ledger_db.engine).get_table_names()) - {VERSION_TABLE}
    assert leftover == set()
    ledger_db.upgrade()
    assert ledger_db.current_revision() == head_revision()
    assert schema_differences(ledger_db) == []


def test_report_state_is_populated_by_the_finalization_rule(ledger_empty_db: Database) -> None:
    db = ledger_empty_db
    db.upgrade("0002")
    with db.engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO benchmark_campaigns VALUES "
                "('c-done', 'p1', 's1', 2, 10.0, 20.0), ('c-open', 'p2', 's1', 2, 30.0, 40.0)"
            )
        )
        for campaign, key, max_attempts in [
            ("c-done", "a", 3),
            ("c-done", "b", 2),
            ("c-open", "a", 4),
            ("c-open", "b", 5),
        ]:
            connection.execute(
                sa.text(
                    "INSERT INTO benchmark_campaign_work (work_id, campaign_id, target_locale,"
                    " suite_case_key, status, attempts, max_attempts, next_attempt_at,"
                    " created_at, updated_at) VALUES (:w, :c, 'en-US', :k, 'succeeded', 1,"
                    " :m, 0, 0, 0)"
                ),
                {"w": f"{campaign}-{key}", "c": campaign, "k": key, "m": max_attempts},
            )
        connection.execute(
            sa.text(
                "INSERT INTO benchmark_campaign_reports VALUES "
                "('c-done', 'p1', 'r', '{}', 'h', 25.0)"
            )
        )
    db.upgrade("0003")
    with db.engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT campaign_id, status, attempts, max_attempts, next_attempt_at,"
                " created_at, updated_at, lease_owner FROM benchmark_campaign_report_state"
                " ORDER BY campaign_id"
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        ("c-done", "succeeded", 1, 2, 20.0, 10.0, 20.0, None),
        ("c-open", "pending", 0, 4, 40.0, 30.0, 40.0, None),
    ]


def test_timestamps_keep_double_precision(ledger_db: Database) -> None:
    stamp = 1768945539.0113564
    with ledger_db.engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO benchmark_campaigns (campaign_id, policy_sha256, suite_sha256,"
                " work_count, created_at, updated_at) VALUES ('c', 'p', 's', 1, :t, :t)"
            ),
            {"t": stamp},
        )
    with ledger_db.engine.connect() as connection:
        stored = connection.execute(sa.text("SELECT created_at FROM benchmark_campaigns")).scalar()
    assert stored == stamp


def test_ledger_shares_a_database_with_another_alembic_app(ledger_empty_db: Database) -> None:
    with ledger_empty_db.engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32))"))
        connection.execute(sa.text("INSERT INTO alembic_version VALUES ('their_rev')"))
        connection.execute(sa.text("CREATE TABLE trials (id INTEGER PRIMARY KEY)"))
    ledger_empty_db.upgrade()
    assert ledger_empty_db.current_revision() == head_revision()
    with ledger_empty_db.engine.connect() as connection:
        theirs = connection.execute(sa.text("SELECT version_num FROM alembic_version")).all()
    assert [tuple(row) for row in theirs] == [("their_rev",)]
    assert schema_differences(ledger_empty_db) == []


def test_services_refuse_a_schema_behind_head(ledger_empty_db: Database) -> None:
    with pytest.raises(SchemaError) as behind_empty:
        ledger_empty_db.require_current_schema()
    assert behind_empty.value.code == SCHEMA_BEHIND
    ledger_empty_db.upgrade("0002")
    with pytest.raises(SchemaError) as behind:
        ledger_empty_db.require_current_schema()
    assert behind.value.code == SCHEMA_BEHIND
    assert "benchledger db upgrade" in str(behind.value)


def test_services_refuse_a_schema_ahead_of_head(ledger_db: Database) -> None:
    with ledger_db.engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    with pytest.raises(SchemaError) as ahead:
        ledger_db.require_current_schema()
    assert ahead.value.code == SCHEMA_AHEAD
    assert "upgrade benchledger" in str(ahead.value)


def _upgrade_in_child(url: str, barrier: Any, errors: Any) -> None:
    database = Database(url)
    try:
        barrier.wait(timeout=60)
        database.upgrade()
    except Exception as error:  # reported to the parent, which fails the test
        errors.put(f"{type(error).__name__}: {error}")
    finally:
        database.dispose()


@pytest.mark.slow
def test_concurrent_upgrades_all_end_at_head(ledger_empty_db: Database) -> None:
    context = multiprocessing.get_context("spawn")
    workers = 4
    barrier = context.Barrier(workers)
    errors = context.Queue()
    processes = [
        context.Process(target=_upgrade_in_child, args=(ledger_empty_db.url, barrier, errors))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    assert [process.exitcode for process in processes] == [0] * workers
    assert ledger_empty_db.current_revision() == head_revision()
    assert schema_differences(ledger_empty_db) == []


def test_schema_comparison_sees_drift(ledger_db: Database) -> None:
    # The models-match test is only as good as the comparison: prove it sees a change.
    with ledger_db.engine.begin() as connection:
        connection.execute(sa.text("DROP INDEX benchmark_campaign_claimable"))
        connection.execute(sa.text("ALTER TABLE benchmark_campaigns ADD COLUMN note TEXT"))
    kinds = {difference[0] for difference in schema_differences(ledger_db)}
    assert {"add_index", "remove_column"} <= kinds


def constraint_names(database: Database) -> dict[str, set[tuple[str, str | None]]]:
    inspector = sa.inspect(database.engine)
    names: dict[str, set[tuple[str, str | None]]] = {}
    for table in Base.metadata.tables:
        found: set[tuple[str, str | None]] = set()
        found |= {("ck", c["name"]) for c in inspector.get_check_constraints(table)}
        found |= {("fk", c["name"]) for c in inspector.get_foreign_keys(table)}
        found |= {("uq", c["name"]) for c in inspector.get_unique_constraints(table)}
        found |= {("ix", c["name"]) for c in inspector.get_indexes(table)}
        if database.dialect_name != "sqlite":  # SQLite does not keep primary key names
            found.add(("pk", inspector.get_pk_constraint(table)["name"]))
        names[table] = found
    return names


def test_constraint_names_match_the_models(ledger_db: Database, ledger_empty_db: Database) -> None:
    # Autogenerate does not compare constraint names; compare them against a
    # schema created straight from the models.
    Base.metadata.create_all(ledger_empty_db.engine)
    assert constraint_names(ledger_db) == constraint_names(ledger_empty_db)


def _campaign_indexes(database: Database) -> dict[str, list[str | None]]:
    indexes = sa.inspect(database.engine).get_indexes("benchmark_campaigns")
    return {index["name"]: index["column_names"] for index in indexes if index["name"]}


def test_revision_0006_indexes_campaigns_in_listing_order(ledger_db: Database) -> None:
    created = "benchmark_campaigns_created"
    assert _campaign_indexes(ledger_db)[created] == ["created_at", "campaign_id"]
    ledger_db.downgrade("0005")
    assert created not in _campaign_indexes(ledger_db)
    ledger_db.upgrade()
    assert _campaign_indexes(ledger_db)[created] == ["created_at", "campaign_id"]
    assert schema_differences(ledger_db) == []


_NEW_ITEM = (
    "INSERT INTO benchmark_campaign_work (work_id, campaign_id, target_locale, suite_case_key,"
    " status, attempts, max_attempts, next_attempt_at, created_at, updated_at)"
    " VALUES (:work_id, 'c', 'de-DE', 'case-1', 'pending', 0, 1, 1.0, 1.0, 1.0)"
)


def _refuses_a_duplicate_item(database: Database, work_id: str) -> bool:
    """A second item of campaign ``c`` for de-DE / case-1, as ``work_id``: refused?"""
    try:
        with database.write() as session:
            session.execute(sa.text(_NEW_ITEM), {"work_id": work_id})
    except sa.exc.IntegrityError:
        return True
    return False


def _unique_work_indexes(database: Database) -> set[str]:
    inspector = sa.inspect(database.engine)
    unique = {c["name"] for c in inspector.get_unique_constraints("benchmark_campaign_work")}
    indexes = inspector.get_indexes("benchmark_campaign_work")
    return unique | {
        str(i["name"]) for i in indexes if i["unique"] and i["name"] in EXPRESSION_INDEXES
    }


def test_revision_0015_one_index_keeps_items_unique_and_in_order(ledger_db: Database) -> None:
    with ledger_db.write() as session:
        session.execute(
            sa.text(
                "INSERT INTO benchmark_campaigns (campaign_id, policy_sha256, suite_sha256,"
                " work_count, created_at, updated_at) VALUES ('c', 'p', 's', 1, 1.0, 1.0)"
            )
        )
        session.execute(sa.text(_NEW_ITEM), {"work_id": "w-1"})
    in_order, constraint = (
        "benchmark_campaign_items_in_order",
        "uq_benchmark_campaign_work_campaign_id",
    )
    at_head = {in_order} if ledger_db.dialect_name == "postgresql" else {constraint}
    assert _unique_work_indexes(ledger_db) == at_head
    assert _refuses_a_duplicate_item(ledger_db, "w-2")
    ledger_db.downgrade("0014")
    assert _unique_work_indexes(ledger_db) == {constraint}
    assert _refuses_a_duplicate_item(ledger_db, "w-3")
    ledger_db.upgrade()
    assert _unique_work_indexes(ledger_db) == at_head
    assert _refuses_a_duplicate_item(ledger_db, "w-4")
    assert schema_differences(ledger_db) == []


def test_revision_0007_fills_attempt_budgets_and_result_seals(ledger_empty_db: Database) -> None:
    import hashlib

    db = ledger_empty_db
    db.upgrade("0006")
    with db.engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO benchmark_campaigns VALUES "
                "('c-1', 'p1', 's1', 2, 10.0, 20.0), ('c-2', 'p2', 's1', 1, 30.0, 40.0)"
            )
        )
        for work_id, campaign, key, status, result in [
            ("w-a", "c-1", "a", "succeeded", "1" * 64),
            ("w-b", "c-1", "b", "pending", None),
            ("w-c", "c-2", "a", "succeeded", "2" * 64),
        ]:
            connection.execute(
                sa.text(
                    "INSERT INTO benchmark_campaign_work (work_id, campaign_id, target_locale,"
                    " suite_case_key, status, attempts, max_attempts, next_attempt_at,"
                    " result_sha256, created_at, updated_at) VALUES (:w, :c, 'en-US', :k, :s,"
                    " :a, :m, 0, :r, 0, 0)"
                ),
                {
                    "w": work_id,
                    "c": campaign,
                    "k": key,
                    "s": status,
                    "a": 2 if campaign == "c-1" else 1,
                    "m": 4 if campaign == "c-1" else 2,
                    "r": result,
                },
            )
    db.upgrade("0007")
    with db.engine.connect() as connection:
        budgets = connection.execute(
            sa.text(
                "SELECT campaign_id, max_attempts, verified_at, verified_ok, verified_problems"
                " FROM benchmark_campaigns ORDER BY campaign_id"
            )
        ).all()
        seals = {
            row[0]: row[1]
            for row in connection.execute(
                sa.text("SELECT work_id, result_seal FROM benchmark_campaign_work")
            )
        }
    assert [tuple(row) for row in budgets] == [
        ("c-1", 4, None, None, None),
        ("c-2", 2, None, None, None),
    ]

    def seal(work_id: str, attempts: int, budget: int, result: str) -> str:
        text = f"benchledger-result-seal-v1:{work_id}:{attempts}:{budget}:{result}"
        return hashlib.sha256(text.encode()).hexdigest()

    assert seals == {
        "w-a": seal("w-a", 2, 4, "1" * 64),
        "w-b": None,
        "w-c": seal("w-c", 1, 2, "2" * 64),
    }
    db.downgrade("0006")
    columns = {c["name"] for c in sa.inspect(db.engine).get_columns("benchmark_campaigns")}
    assert "max_attempts" not in columns and "verified_at" not in columns
    with db.engine.connect() as connection:
        assert (
            connection.execute(sa.text("SELECT COUNT(*) FROM benchmark_campaign_work")).scalar()
            == 3
        )
    db.upgrade()
    assert schema_differences(db) == []
