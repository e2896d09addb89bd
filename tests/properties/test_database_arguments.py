"""Hostile arguments to ``Database(...)`` and ``AsyncDatabase(...)``: each call builds a
database (nothing is connected yet) or raises a ``LedgerError`` with a documented code
(``ledger.database.url_invalid``, ``unsupported``, ``driver_missing``,
``options_invalid``); never a SQLAlchemy, driver or Python error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchledger.aio import AsyncDatabase
from benchledger.db import Database
from benchledger.errors import LedgerError

from .helpers import assert_documented
from .hostile import FOCUSED, HOSTILE, short

_SCHEMES = st.sampled_from(
    [
        "sqlite", "sqlite+pysqlite", "sqlite+aiosqlite", "postgresql", "postgresql+psycopg",
        "postgresql+psycopg_async", "postgresql+asyncpg", "postgresql+psycopg2", "postgres",
        "mysql", "mysql+pymysql", "mariadb", "oracle", "mssql", "SQLITE", "nosuch", "a+b+c",
        "sqlite+", "+", "",
    ]
)  # fmt: skip
_PART = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", ":", "@", "/", "?", "%", "%zz", "\x00", "65536", "-1", "99999999999", "abc", ":memory:"]
)
#: URLs built from pieces: known and unknown schemes, ports, hosts, query arguments.
URLS = st.one_of(
    st.builds(lambda s, rest: f"{s}://{rest}", _SCHEMES, _PART),
    st.builds(lambda s, path: f"{s}:///{path}", _SCHEMES, _PART),
    st.builds(
        lambda s, host, port, name, query: f"{s}://u:p@{host}:{port}/{name}?{query}",
        _SCHEMES, _PART, _PART, _PART, _PART,
    ),
    st.builds(
        lambda key, value: f"sqlite:///x.db?{key}={value}",
        st.sampled_from(["timeout", "mode", "uri", "check_same_thread", "isolation_level"]),
        _PART,
    ),
    st.text(max_size=40),
    HOSTILE,
)  # fmt: skip
POOL_SIZES = st.none() | st.integers() | HOSTILE
ECHOES = st.booleans() | st.just("debug") | HOSTILE


def _build(kind: type[Any], url: Any, **options: Any) -> None:
    try:
        database = kind(url, **options)
    except LedgerError as error:
        assert_documented(error)
        assert error.code.startswith("ledger.database."), error.code
        return
    except Exception as error:  # the property: nothing but a LedgerError escapes
        raise AssertionError(
            f"{kind.__name__}({short(url)}, {short(options)}) raised "
            f"{type(error).__name__}: {short(error)}"
        ) from error
    if isinstance(database, AsyncDatabase):
        asyncio.run(database.dispose())
    else:
        database.dispose()


@pytest.mark.parametrize("kind", [Database, AsyncDatabase])
def test_every_focused_hostile_argument(kind: type[Any]) -> None:
    for value in FOCUSED:
        _build(kind, value)
        _build(kind, "sqlite://", pool_size=value)
        _build(kind, "sqlite://", echo=value)


@pytest.mark.parametrize(
    ("url", "code"),
    [
        (42, "ledger.database.url_invalid"),
        ("not a url", "ledger.database.url_invalid"),
        ("nosuchdialect://x", "ledger.database.url_invalid"),
        ("postgresql://u@h:abc/x", "ledger.database.url_invalid"),
        ("postgresql://u@h:70000/x", "ledger.database.url_invalid"),
        ("sqlite:///x.db?timeout=abc", "ledger.database.url_invalid"),
        ("sqlite:///nul\x00.db", "ledger.database.url_invalid"),
        ("mysql://x", "ledger.database.unsupported"),
        ("oracle://u:p@h/db", "ledger.database.unsupported"),
    ],
)
@pytest.mark.parametrize("kind", [Database, AsyncDatabase])
def test_known_bad_urls_have_their_codes(kind: type[Any], url: Any, code: str) -> None:
    with pytest.raises(LedgerError) as caught:
        kind(url)
    assert caught.value.code == code
    assert "p@" not in str(caught.value) or url == "oracle://u:p@h/db"  # no URL echoed


@pytest.mark.parametrize("pool_size", [0, -1, True, 1.5, "5", 10**6, 2**63])
def test_bad_pool_sizes_are_options_invalid(pool_size: Any) -> None:
    for kind in (Database, AsyncDatabase):
        with pytest.raises(LedgerError) as caught:
            kind("postgresql+psycopg://u@localhost/db", pool_size=pool_size)
        assert caught.value.code == "ledger.database.options_invalid"


def test_a_sync_database_refuses_an_async_driver_and_a_url_object_works() -> None:
    with pytest.raises(LedgerError) as caught:
        Database("sqlite+aiosqlite:///x.db")
    assert caught.value.code == "ledger.database.unsupported"
    Database(sa.make_url("sqlite://")).dispose()


@settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    kind=st.sampled_from([Database, AsyncDatabase]),
    url=URLS,
    pool_size=POOL_SIZES,
    echo=ECHOES,
    given_options=st.sets(st.sampled_from(["pool_size", "echo"])),
)
def test_every_constructor_call_works_or_is_a_documented_refusal(
    kind: type[Any], url: Any, pool_size: Any, echo: Any, given_options: set[str]
) -> None:
    options = {"pool_size": pool_size, "echo": echo}
    _build(kind, url, **{name: options[name] for name in given_options})
