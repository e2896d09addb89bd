"""pytest plugin (entry point ``pytest11``): throwaway ledger databases per test.

Fixtures:

- ``ledger_db``: a migrated :class:`~benchledger.Database`, new for each test,
  on each configured backend (the test runs once per backend);
- ``ledger_empty_db``: the same, but not migrated (for schema tests);
- ``ledger_backend``: the backend name of the current test;
- ``ledger_clock``: a :class:`~benchledger.testing.LedgerClock` (epoch seconds
  that move only when the test moves them), new for each test;
- ``ledger_session``: a SQLAlchemy session on ``ledger_db`` that every model
  factory of :mod:`benchledger.testing.factories` flushes into during the
  test, with timestamps from ``ledger_clock``. It is committed when setup
  ends and before any other connection to ``ledger_db`` begins (a service
  call), so services see what the factories made;
- ``campaign_service`` / ``study_service``: the services on ``ledger_db``,
  reading time from ``ledger_clock``.

Backends: SQLite files by default. Give a PostgreSQL server with
``--ledger-url`` or ``BENCHLEDGER_TEST_URL`` (a database on it is created per
test and dropped after), and choose backends with ``--ledger-backends`` or
``BENCHLEDGER_TEST_BACKENDS`` (``sqlite``, ``postgresql``, ``pgbouncer``,
comma-separated; default: ``postgresql`` when a URL is given, else ``sqlite``).
``pgbouncer`` is PostgreSQL through a PgBouncer in transaction mode, given with
``--ledger-pgbouncer-url`` or ``BENCHLEDGER_TEST_PGBOUNCER_URL`` (its databases are
made through it; the URL gets ``benchledger_pooler=transaction`` if it lacks it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import Database, resolve_url
from benchledger.db.engine import POOLER_OPTION, TRANSACTION_POOLING
from benchledger.testing.clock import LedgerClock
from benchledger.testing.databases import BACKENDS, DatabaseFactory
from benchledger.testing.session import LedgerTestSession

if TYPE_CHECKING:
    from benchledger.services.campaigns import CampaignService
    from benchledger.services.studies import StudyService

URL_ENV = "BENCHLEDGER_TEST_URL"
LEGACY_URL_ENV = "BENCHLEDGER_TEST_PG_URL"
BACKENDS_ENV = "BENCHLEDGER_TEST_BACKENDS"
PGBOUNCER_URL_ENV = "BENCHLEDGER_TEST_PGBOUNCER_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("benchledger")
    group.addoption(
        "--ledger-url",
        default=None,
        help=f"PostgreSQL server URL for ledger_db (env {URL_ENV})",
    )
    group.addoption(
        "--ledger-backends",
        default=None,
        help=(
            "comma-separated backends for ledger_db: sqlite,postgresql,pgbouncer "
            f"(env {BACKENDS_ENV})"
        ),
    )
    group.addoption(
        "--ledger-pgbouncer-url",
        default=None,
        help=(
            "a PgBouncer (transaction mode) in front of a PostgreSQL server, for the "
            f"pgbouncer backend (env {PGBOUNCER_URL_ENV})"
        ),
    )


def ledger_server_url(config: pytest.Config) -> str | None:
    value = config.getoption("--ledger-url") or os.environ.get(URL_ENV)
    return value or os.environ.get(LEGACY_URL_ENV) or None


def ledger_pgbouncer_url(config: pytest.Config) -> str | None:
    """The pgbouncer backend's URL, with ``benchledger_pooler=transaction`` (``None``: none
    given)."""
    value = config.getoption("--ledger-pgbouncer-url") or os.environ.get(PGBOUNCER_URL_ENV)
    if not value:
        return None
    url = sa.make_url(resolve_url(value))
    if POOLER_OPTION not in url.query:
        url = url.update_query_dict({POOLER_OPTION: TRANSACTION_POOLING})
    return url.render_as_string(hide_password=False)


def ledger_backends(config: pytest.Config) -> tuple[str, ...]:
    raw = config.getoption("--ledger-backends") or os.environ.get(BACKENDS_ENV)
    if not raw:
        return ("postgresql",) if ledger_server_url(config) else ("sqlite",)
    chosen = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = sorted(set(chosen) - set(BACKENDS))
    if unknown:
        raise pytest.UsageError(f"unknown ledger backend(s): {', '.join(unknown)}")
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ledger_backend" in metafunc.fixturenames:
        metafunc.parametrize("ledger_backend", ledger_backends(metafunc.config), scope="session")


class _Factories:
    def __init__(self, config: pytest.Config, workdir: Path) -> None:
        self._config = config
        self._workdir = workdir
        self._by_backend: dict[str, DatabaseFactory] = {}

    def get(self, backend: str) -> DatabaseFactory:
        factory = self._by_backend.get(backend)
        if factory is None:
            url = None
            if backend == "postgresql":
                url = ledger_server_url(self._config)
                if url is None:
                    pytest.skip(f"no PostgreSQL server: pass --ledger-url or set {URL_ENV}")
            elif backend == "pgbouncer":
                url = ledger_pgbouncer_url(self._config)
                if url is None:
                    pytest.skip(
                        f"no PgBouncer: pass --ledger-pgbouncer-url or set {PGBOUNCER_URL_ENV}"
                    )
            factory = DatabaseFactory(backend, self._workdir, url)
            self._by_backend[backend] = factory
        return factory

    def close(self) -> None:
        for factory in self._by_backend.values():
            factory.close()


@pytest.fixture(scope="session")
def _ledger_factories(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_Factories]:
    factories = _Factories(request.config, tmp_path_factory.mktemp("ledger"))
    yield factories
    factories.close()


@pytest.fixture
def ledger_backend(request: pytest.FixtureRequest) -> str:
    """The backend of the current test (parametrized by the plugin)."""
    return str(request.param)


def _database(factories: _Factories, backend: str, *, migrated: bool) -> Iterator[Database]:
    factory = factories.get(backend)
    url = factory.migrated_url() if migrated else factory.empty_url()
    database = Database(url)
    try:
        yield database
    finally:
        database.dispose()
        factory.drop(url)


@pytest.fixture
def ledger_db(_ledger_factories: _Factories, ledger_backend: str) -> Iterator[Database]:
    """A migrated ledger database of its own for this test."""
    yield from _database(_ledger_factories, ledger_backend, migrated=True)


@pytest.fixture
def ledger_empty_db(_ledger_factories: _Factories, ledger_backend: str) -> Iterator[Database]:
    """An empty (unmigrated) database of its own for this test."""
    yield from _database(_ledger_factories, ledger_backend, migrated=False)


# -- clock, session and factories -------------------------------------------------

_SESSION_KEY = pytest.StashKey[LedgerTestSession]()


@pytest.fixture
def ledger_clock() -> LedgerClock:
    """A controllable clock, at :data:`~benchledger.testing.clock.DEFAULT_START`."""
    return LedgerClock()


@pytest.fixture
def ledger_session(
    request: pytest.FixtureRequest, ledger_db: Database, ledger_clock: LedgerClock
) -> Iterator[Session]:
    """The test's session on ``ledger_db``; every model factory flushes into it."""
    owner = LedgerTestSession(ledger_db, ledger_clock)
    with owner as session:
        request.node.stash[_SESSION_KEY] = owner
        try:
            yield session
        finally:
            del request.node.stash[_SESSION_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Setup is over: commit what fixtures made with the factories."""
    owner = item.stash.get(_SESSION_KEY, None)
    if owner is not None:
        owner.commit()


# -- services -----------------------------------------------------------------------


@pytest.fixture
def campaign_service(ledger_db: Database, ledger_clock: LedgerClock) -> CampaignService:
    """A :class:`~benchledger.services.campaigns.CampaignService` on ``ledger_db``.

    Its clock is ``ledger_clock``: calls that pass ``now=None`` read the test's time.
    """
    from benchledger.services.campaigns import CampaignService

    return CampaignService(ledger_db, clock=ledger_clock)


@pytest.fixture
def study_service(ledger_db: Database, ledger_clock: LedgerClock) -> StudyService:
    """A :class:`~benchledger.services.studies.StudyService` on ``ledger_db``.

    Default adapters (runs, materials, evidence, access in the same database);
    its clock is ``ledger_clock``.
    """
    from benchledger.services.studies import StudyService

    return StudyService(ledger_db, clock=ledger_clock)
