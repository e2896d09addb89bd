"""The suite through PgBouncer in transaction pooling mode (the ``pgbouncer`` backend).

``scripts/with-postgres.sh`` starts a PgBouncer (Debian's package, ``pool_mode =
transaction``) in front of the suite's PostgreSQL server and exports
``BENCHLEDGER_TEST_PGBOUNCER_URL``; the plugin's ``pgbouncer`` backend hands out
databases through it, with ``benchledger_pooler=transaction`` in their URL.

Not every test runs through it (``make test`` must stay short on two cores): when
this directory is collected, a test elsewhere runs on the ``pgbouncer`` backend only
if its file is in :data:`THROUGH_PGBOUNCER`; the rest of its ``[pgbouncer]`` runs
are deselected (run without this directory, ``pytest tests/campaign`` with the
backend chosen runs all of it through PgBouncer). Tests of this directory run on
the ``pgbouncer`` backend only.

The chaos scenarios that restart or cut their own server run here too
(``test_chaos.py``), through a PgBouncer in front of that server
(:class:`~.helpers.PgBouncerUnderTest`).

Under ``CI=true`` a missing PgBouncer (no URL, or no pgbouncer binary for the
chaos scenarios) is a failure, never a skip.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.testing.plugin import ledger_backends, ledger_pgbouncer_url
from chaos.helpers import PostgresUnderTest, postgres_bindir

from .helpers import PgBouncerUnderTest, pgbouncer_binary

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent

#: The suite's files (relative to ``tests/``; a directory takes all of it) that also
#: run through PgBouncer: the hot path (claim, renew, complete, fail, batched claims
#: and group commit, a claim queued behind a lock), the worker loop, real worker
#: processes, cancel and resume, flow control, limit groups, throttling, the fleet,
#: verify and reports, the archive (its streams, row locks and snapshot, in about four
#: seconds), and every chaos scenario. Left out, and why:
#: ``campaign/test_worker_faults.py`` shortens the lock wait with a session
#: ``SET lock_timeout`` on connect, session state that transaction pooling does not
#: keep (behind PgBouncer, set it on the role: docs/operations.md);
#: ``campaign/test_hot_path_pool.py`` kills the server session under a pooled client
#: connection, which through PgBouncer is not the client's own;
#: ``campaign/test_wakeups.py`` is LISTEN/NOTIFY, off through a transaction pooler.
#: The rest (create, the drivers' error mapping, status, health, results, tamper,
#: cost...) only to keep ``make test`` short: they read and write through the same
#: Database and statements the listed files prove, and run on PostgreSQL directly.
THROUGH_PGBOUNCER = (
    "campaign/test_work.py",
    "campaign/test_batching.py",
    "campaign/test_hot_path_lock_wait.py",
    "campaign/test_worker_loop.py",
    "campaign/test_processes.py",
    "campaign/test_actions_cancel.py",
    "campaign/test_flow_control.py",
    "campaign/test_limit_groups.py",
    "campaign/test_throttling.py",
    "campaign/test_fleet.py",
    "campaign/test_verify.py",
    "campaign/test_reports.py",
    "campaign/test_archive.py",
    "chaos/",
    "pgbouncer/",
)


def _through_pgbouncer(path: Path) -> bool:
    try:
        relative = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return False
    return any(
        relative.startswith(chosen) if chosen.endswith("/") else relative == chosen
        for chosen in THROUGH_PGBOUNCER
    )


def _backend(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("ledger_backend")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = "pgbouncer" in ledger_backends(config)
    if chosen and os.environ.get("CI") == "true" and ledger_pgbouncer_url(config) is None:
        raise pytest.UsageError(
            "CI=true but no PgBouncer was given (BENCHLEDGER_TEST_PGBOUNCER_URL): "
            "run the suite through `make test`, which starts one"
        )
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        backend = _backend(item)
        inside = item.path.resolve().is_relative_to(HERE)
        if inside:
            keep = backend in (None, "pgbouncer")
        else:
            keep = backend != "pgbouncer" or _through_pgbouncer(item.path)
        (kept if keep else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# -- a PostgreSQL and a PgBouncer of the test's own (the chaos scenarios) ---------------


@pytest.fixture
def crew_logs(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {what}")
    pytest.skip(what)


class PostgresBehindPgBouncer(PostgresUnderTest):
    """The test's own server, whose :meth:`start` returns once PgBouncer serves the
    ``watched`` databases again.

    After the server was down, PgBouncer fails a client at once while its last login
    to the server failed ("server login has been failing, try again later", SQLSTATE
    08P01: a transient fault, which the workers ride out) until a login succeeds; the
    tests' own reads right after a restart do not retry, so they wait here first.
    """

    def __init__(self, bindir: Path) -> None:
        self.watched: list[sa.URL] = []
        super().__init__(bindir)

    def start(self) -> None:
        super().start()
        for url in self.watched:
            probe = sa.create_engine(url, poolclass=sa.pool.NullPool)
            deadline = time.monotonic() + 30
            try:
                while True:
                    try:
                        with probe.connect() as connection:
                            connection.exec_driver_sql("SELECT 1")
                        break
                    except sa.exc.OperationalError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
            finally:
                probe.dispose()


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresBehindPgBouncer]:
    """A dedicated throwaway server (it gets stopped, crashed and restarted)."""
    if "pgbouncer" not in os.environ.get("BENCHLEDGER_TEST_BACKENDS", ""):
        _missing("PgBouncer is not among this run's backends")
    bindir = postgres_bindir()
    if bindir is None:
        _missing("no PostgreSQL server binaries (install postgresql)")
    assert bindir is not None
    server = PostgresBehindPgBouncer(bindir)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def own_pgbouncer(own_postgres: PostgresBehindPgBouncer) -> Iterator[PgBouncerUnderTest]:
    """A PgBouncer in transaction mode in front of ``own_postgres`` (it may be crashed)."""
    binary = pgbouncer_binary()
    if binary is None:
        _missing("no pgbouncer binary (install Debian's pgbouncer package)")
    assert binary is not None
    bouncer = PgBouncerUnderTest(binary, own_postgres.workdir, own_postgres.port)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture
def restartable_db(
    own_postgres: PostgresBehindPgBouncer, own_pgbouncer: PgBouncerUnderTest
) -> Iterator[Database]:
    """A migrated ledger database on the dedicated server, reached through its PgBouncer."""
    name = f"bouncer_{os.getpid()}_{int(time.monotonic() * 1000)}"
    admin = sa.create_engine(own_postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    db = Database(sa.make_url(own_pgbouncer.url).set(database=name))
    assert db.transaction_pooling
    db.upgrade()
    own_postgres.watched.append(db.engine.url)
    try:
        yield db
    finally:
        own_postgres.watched.remove(db.engine.url)
        db.dispose()
