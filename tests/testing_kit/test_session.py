"""ledger_session: one session per test, where factories flush; committed when needed."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from factory.declarations import SubFactory
from sqlalchemy.orm import Session

from benchledger import Database
from benchledger.models.campaign import StoredSuiteRow
from benchledger.testing import LedgerClock, bind_factories
from benchledger.testing.factories import (
    LedgerModelFactory,
    StoredSuiteRowFactory,
    SuiteFactory,
    bound_session,
)
from benchledger.testing.session import LedgerTestSession


def _suite_count(db: Database) -> int:
    with db.read() as session:
        return int(session.scalar(sa.select(sa.func.count()).select_from(StoredSuiteRow)) or 0)


def _count_elsewhere(db: Database) -> int:
    """Count through a second engine: sees only what is really committed."""
    other = Database(db.url)
    try:
        return _suite_count(other)
    finally:
        other.dispose()


def test_factories_flush_into_the_tests_session(ledger_session: Session) -> None:
    assert bound_session() is ledger_session
    rows = StoredSuiteRowFactory.create_batch(3)
    for row in rows:
        assert sa.inspect(row).session is ledger_session
        assert sa.inspect(row).persistent  # flushed, not merely added
    assert ledger_session.scalar(sa.select(sa.func.count()).select_from(StoredSuiteRow)) == 3


def test_every_factory_shares_the_one_session(ledger_session: Session) -> None:
    seen = set()
    for _ in range(5):
        row = StoredSuiteRowFactory()
        seen.add(id(sa.inspect(row).session))
    assert seen == {id(ledger_session)}


def test_rows_are_committed_before_another_connection_begins(
    ledger_db: Database, ledger_session: Session
) -> None:
    StoredSuiteRowFactory()
    assert ledger_session.in_transaction()
    # A service, db.read(), or any other connection of ledger_db commits it first.
    assert _suite_count(ledger_db) == 1
    assert not ledger_session.in_transaction()
    assert _count_elsewhere(ledger_db) == 1
    # The session stays usable, and its objects keep their values.
    row = StoredSuiteRowFactory()
    assert row.case_count == 2
    assert _suite_count(ledger_db) == 2


def test_a_write_elsewhere_does_not_wait_for_the_tests_lock(
    ledger_db: Database, ledger_session: Session
) -> None:
    StoredSuiteRowFactory()
    # On SQLite a write transaction starts with BEGIN IMMEDIATE: it would wait
    # for the test session's lock (30 s, then fail) had that not been committed.
    with ledger_db.write() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(StoredSuiteRow)) == 1
    StoredSuiteRowFactory()
    with ledger_db.engine.connect() as connection:
        assert connection.scalar(sa.select(sa.func.count()).select_from(StoredSuiteRow)) == 2


@pytest.fixture
def made_in_setup(ledger_session: Session) -> StoredSuiteRow:
    row: StoredSuiteRow = StoredSuiteRowFactory()
    return row


def test_setup_is_committed_before_the_test_runs(
    ledger_db: Database, made_in_setup: StoredSuiteRow
) -> None:
    # A separate engine has no hook into the test's session: only a commit shows it.
    assert _count_elsewhere(ledger_db) == 1


def test_timestamps_come_from_the_ledger_clock(
    ledger_session: Session, ledger_clock: LedgerClock
) -> None:
    assert StoredSuiteRowFactory().created_at == ledger_clock.peek()
    ledger_clock.advance(90)
    assert StoredSuiteRowFactory().created_at == ledger_clock.peek()


def test_content_addressed_rows_are_stored_once(ledger_session: Session) -> None:
    suite = SuiteFactory()
    first = StoredSuiteRowFactory(suite=suite)
    second = StoredSuiteRowFactory(suite=suite)
    assert first is second
    assert ledger_session.scalar(sa.select(sa.func.count()).select_from(StoredSuiteRow)) == 1


def test_unbound_factories_say_how_to_bind_them() -> None:
    assert bound_session() is None
    with pytest.raises(RuntimeError, match="ledger_session"):
        StoredSuiteRowFactory()
    row = StoredSuiteRowFactory.build()  # building needs no session
    assert sa.inspect(row).transient


def test_bind_factories_nests_and_restores(ledger_db: Database) -> None:
    with Session(ledger_db.engine) as outer, Session(ledger_db.engine) as inner:
        with bind_factories(outer):
            assert bound_session() is outer

            class LaterFactory(StoredSuiteRowFactory):  # defined while bound
                pass

            with bind_factories(inner):
                assert bound_session() is inner
                assert LaterFactory._meta.sqlalchemy_session is inner
            assert bound_session() is outer
            assert LaterFactory._meta.sqlalchemy_session is outer
        assert bound_session() is None
        assert LaterFactory._meta.sqlalchemy_session is None
        assert LedgerModelFactory._meta.sqlalchemy_session is None
        outer.rollback()
        inner.rollback()


def test_users_subclasses_are_bound_too(ledger_session: Session) -> None:
    class MySuiteFactory(StoredSuiteRowFactory):
        class Params:
            suite = SubFactory(SuiteFactory, case_count=4)

    row = MySuiteFactory()
    assert row.case_count == 4
    assert sa.inspect(row).session is ledger_session


def test_test_session_rolls_back_what_was_never_committed(ledger_db: Database) -> None:
    with LedgerTestSession(ledger_db) as session:
        StoredSuiteRowFactory()
        assert session.in_transaction()
    assert bound_session() is None
    assert _count_elsewhere(ledger_db) == 0


def test_a_failed_flush_does_not_break_other_connections(ledger_db: Database) -> None:
    with LedgerTestSession(ledger_db) as session:
        StoredSuiteRowFactory()
        session.commit()
        with pytest.raises(sa.exc.IntegrityError):
            StoredSuiteRowFactory(case_count=None)
        # The session needs a rollback; the service's connection must still work.
        assert _suite_count(ledger_db) == 1
        session.rollback()
