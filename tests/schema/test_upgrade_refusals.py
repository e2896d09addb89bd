"""Upgrading a database that a newer benchledger upgraded is one coded refusal."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from benchledger.db import VERSION_TABLE, Database
from benchledger.errors import SCHEMA_AHEAD, SchemaError


@pytest.mark.parametrize("operation", ["upgrade", "downgrade"])
def test_a_database_from_a_newer_benchledger_is_refused_with_schema_ahead(
    ledger_db: Database, operation: str
) -> None:
    with ledger_db.engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999_future'"))
    with pytest.raises(SchemaError) as caught:
        if operation == "upgrade":
            ledger_db.upgrade()
        else:
            ledger_db.downgrade("0001")
    assert caught.value.code == SCHEMA_AHEAD
    assert "9999_future" in str(caught.value)
    assert ledger_db.current_revision() == "9999_future"  # untouched
