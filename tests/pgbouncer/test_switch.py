"""The transaction-pooling switch, ``?benchledger_pooler=transaction``: read, checked and
taken off the URL before the driver sees it (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.aio import AsyncDatabase
from benchledger.db import Database, engine_options
from benchledger.db.engine import split_pooler
from benchledger.errors import DATABASE_URL_INVALID, LedgerError

BOUNCER = "postgresql+psycopg://ledger:s3cret@bouncer.internal:6432/ledger"


def test_the_switch_turns_transaction_pooling_on_and_listen_off() -> None:
    db = Database(f"{BOUNCER}?sslmode=disable&benchledger_pooler=transaction")
    assert db.transaction_pooling is True
    assert db.supports_listen is False
    # The URL keeps it (worker processes started with it connect the same way) ...
    assert sa.make_url(db.url).query["benchledger_pooler"] == "transaction"
    # ... the driver never sees it; libpq's own options stay.
    assert dict(db.engine.url.query) == {"sslmode": "disable"}
    assert db.engine.url.password == "s3cret"
    db.dispose()


def test_without_the_switch_nothing_changes() -> None:
    direct = Database(BOUNCER.replace(":6432", ":5432"))
    assert (direct.transaction_pooling, direct.supports_listen) == (False, True)
    assert "prepare_threshold" not in engine_options(direct.engine.url).get("connect_args", {})
    direct.dispose()
    embedded = Database("sqlite://")
    assert (embedded.transaction_pooling, embedded.supports_listen) == (False, False)
    embedded.dispose()


def test_the_switch_turns_server_side_prepared_statements_off() -> None:
    url, pooled = split_pooler(sa.make_url(f"{BOUNCER}?benchledger_pooler=transaction"))
    assert pooled and "benchledger_pooler" not in url.query
    options = engine_options(url, transaction_pooling=pooled)
    assert options["connect_args"] == {"prepare_threshold": None}  # psycopg never prepares


def test_postgresql_urls_without_a_driver_take_the_switch_too() -> None:
    db = Database("postgresql://ledger@bouncer:6432/ledger?benchledger_pooler=transaction")
    assert db.transaction_pooling and db.engine.url.drivername == "postgresql+psycopg"
    db.dispose()


@pytest.mark.parametrize(
    "url",
    [
        f"{BOUNCER}?benchledger_pooler=session",
        f"{BOUNCER}?benchledger_pooler=TRANSACTION",
        f"{BOUNCER}?benchledger_pooler=transaction&benchledger_pooler=transaction",
        "sqlite:///ledger.db?benchledger_pooler=transaction",
    ],
)
def test_a_switch_that_says_anything_else_is_refused_with_a_code(url: str) -> None:
    for make in (Database, AsyncDatabase):
        with pytest.raises(LedgerError) as caught:
            make(url)
        assert caught.value.code == DATABASE_URL_INVALID
        assert "benchledger_pooler" in str(caught.value)
        assert "s3cret" not in str(caught.value)  # never the URL's password


def test_async_database_takes_the_same_switch(tmp_path: Path) -> None:
    db = AsyncDatabase(f"{BOUNCER}?benchledger_pooler=transaction")
    assert db.transaction_pooling is True and db.supports_listen is False
    assert db.sync.transaction_pooling is True and db.sync.supports_listen is False
    assert sa.make_url(db.url).query["benchledger_pooler"] == "transaction"
    assert db.sync.url == db.url  # what the worker processes are handed
    assert "benchledger_pooler" not in db.async_engine.url.query
    direct = AsyncDatabase(BOUNCER)
    assert direct.transaction_pooling is False and direct.supports_listen is True
    assert AsyncDatabase(f"sqlite:///{tmp_path / 'ledger.db'}").supports_listen is False
