"""Database: URL resolution, SQLite setup, read/write transactions."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from benchledger import Database
from benchledger.cli import main
from benchledger.db import DEFAULT_URL, URL_ENV, head_revision, insert_if_absent, resolve_url
from benchledger.models import StoredPolicyRow

# A campaign row named by its columns (later revisions add columns with defaults).
NEW_CAMPAIGN = (
    "INSERT INTO benchmark_campaigns"
    " (campaign_id, policy_sha256, suite_sha256, work_count, created_at, updated_at) VALUES "
)

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy"


def test_url_comes_from_argument_then_environment_then_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    assert resolve_url(None) == DEFAULT_URL
    monkeypatch.setenv(URL_ENV, "sqlite:///from-env.db")
    assert resolve_url(None) == "sqlite:///from-env.db"
    assert resolve_url("sqlite:///given.db") == "sqlite:///given.db"
    assert resolve_url("postgresql://u:p@h/d") == "postgresql+psycopg://u:p@h/d"


def test_sqlite_connections_are_configured(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    database.upgrade()
    with database.read() as session:
        assert session.execute(sa.text("PRAGMA foreign_keys")).scalar() == 1
        assert session.execute(sa.text("PRAGMA busy_timeout")).scalar() == 30000
        assert session.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    database.dispose()


def test_only_the_hot_path_writer_keeps_temporary_files_in_memory(tmp_path: Path) -> None:
    """Its statement journals stay in memory; any other connection, and the writer once
    back in the pool, keeps SQLite's default (files: a deletion may journal a table)."""
    database = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    database.upgrade()
    with database.write_connection() as connection:
        assert connection.exec_driver_sql("PRAGMA temp_store").scalar() == 2  # MEMORY
        kept = connection.connection.dbapi_connection
    with database.read() as session:
        assert session.execute(sa.text("PRAGMA temp_store")).scalar() == 0  # DEFAULT
    with pytest.raises(RuntimeError), database.write_connection() as connection:
        assert connection.connection.dbapi_connection is kept
        raise RuntimeError("boom")  # a failed transaction gives the writer back to the pool
    assert kept is not None
    assert kept.execute("PRAGMA temp_store").fetchone() == (0,)
    database.dispose()


def test_sqlite_foreign_keys_are_enforced(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    database.upgrade()
    with pytest.raises(sa.exc.IntegrityError), database.write() as session:
        session.execute(
            sa.text(
                "INSERT INTO benchmark_campaign_report_state (campaign_id, status, attempts,"
                " max_attempts, next_attempt_at, created_at, updated_at)"
                " VALUES ('missing', 'pending', 0, 1, 0, 0, 0)"
            )
        )


def test_reads_do_not_wait_for_a_writer(ledger_db: Database) -> None:
    with ledger_db.write() as writer:
        writer.execute(sa.text(NEW_CAMPAIGN + "('c', 'p', 's', 1, 1.0, 1.0)"))
        started = time.monotonic()
        with ledger_db.read() as reader:
            seen = reader.execute(sa.text("SELECT COUNT(*) FROM benchmark_campaigns")).scalar()
        waited = time.monotonic() - started
    assert seen == 0  # the uncommitted row is invisible, and the read did not block
    assert waited < 5.0
    with ledger_db.read() as reader:
        assert reader.execute(sa.text("SELECT COUNT(*) FROM benchmark_campaigns")).scalar() == 1


def test_insert_if_absent_says_whether_it_inserted(ledger_db: Database) -> None:
    row = {"policy_sha256": "a" * 64, "policy_json": "{}", "created_at": 1.0}
    with ledger_db.write_connection() as connection:
        assert insert_if_absent(connection, StoredPolicyRow, row) is True
        assert insert_if_absent(connection, StoredPolicyRow, {**row, "created_at": 2.0}) is False
    with ledger_db.write() as session:
        assert (
            insert_if_absent(session, StoredPolicyRow, {**row, "policy_sha256": "b" * 64}) is True
        )
        assert insert_if_absent(session, StoredPolicyRow, row) is False


def test_write_transactions_roll_back_on_error(ledger_db: Database) -> None:
    with pytest.raises(RuntimeError), ledger_db.write() as session:
        session.execute(sa.text(NEW_CAMPAIGN + "('c', 'p', 's', 1, 1.0, 1.0)"))
        raise RuntimeError("boom")
    with ledger_db.read() as reader:
        assert reader.execute(sa.text("SELECT COUNT(*) FROM benchmark_campaigns")).scalar() == 0


def test_sqlite_writers_queue_instead_of_failing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Database(url).upgrade()
    first, second = Database(url), Database(url)
    order: list[str] = []
    holding = threading.Event()

    def hold_the_write_lock() -> None:
        with first.write() as session:
            session.execute(sa.text(NEW_CAMPAIGN + "('a', 'p', 's', 1, 1.0, 1.0)"))
            holding.set()
            time.sleep(0.5)
            order.append("first committed")

    thread = threading.Thread(target=hold_the_write_lock)
    thread.start()
    holding.wait(timeout=10)
    # A read-then-write transaction: with a deferred BEGIN its snapshot would be
    # stale once the first writer commits, and the INSERT would fail at once.
    # BEGIN IMMEDIATE makes it wait for the lock before reading.
    with second.write() as session:
        session.execute(sa.text("SELECT COUNT(*) FROM benchmark_campaigns")).scalar()
        session.execute(sa.text(NEW_CAMPAIGN + "('b', 'p', 's', 1, 1.0, 1.0)"))
        order.append("second wrote")
    thread.join()
    assert order == ["first committed", "second wrote"]


def test_cli_db_upgrade_adopts_a_legacy_file(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    shutil.copyfile(LEGACY / "v2.sqlite", path)
    result = CliRunner().invoke(main, ["--url", f"sqlite:///{path}", "db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert Database(f"sqlite:///{path}").current_revision() == head_revision()
