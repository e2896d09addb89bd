"""The study schema: append-only audit, constraints as a last line of defence, 0005 reversible."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from benchledger.db import Database, head_revision

from .helpers import STUDY_TABLES, Kit


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE study_audit_log SET actor_id = 'mallory'",
        "DELETE FROM study_audit_log",
    ],
)
def test_the_audit_log_is_append_only(kit: Kit, statement: str) -> None:
    kit.study()
    before = kit.audit()
    assert before
    with pytest.raises(sa.exc.DatabaseError), kit.db.write() as session:
        session.execute(sa.text(statement))
    assert kit.audit() == before


def test_the_database_refuses_a_charge_above_the_limits(kit: Kit) -> None:
    study = kit.study()
    with pytest.raises(sa.exc.IntegrityError), kit.db.write() as session:
        session.execute(
            sa.text(
                "UPDATE studies SET charged_retained_bytes = limit_retained_bytes + 1 "
                "WHERE id = :id"
            ),
            {"id": study.id},
        )


def test_revision_0005_downgrades_and_upgrades_again(ledger_db: Database) -> None:
    names = {table.name for table in STUDY_TABLES}
    assert names <= set(sa.inspect(ledger_db.engine).get_table_names())
    ledger_db.downgrade("0004")
    assert not names & set(sa.inspect(ledger_db.engine).get_table_names())
    ledger_db.upgrade()
    assert ledger_db.current_revision() == head_revision()
    assert names <= set(sa.inspect(ledger_db.engine).get_table_names())
