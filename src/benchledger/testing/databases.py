"""Throwaway ledger databases for tests: a migrated template, cloned per test.

Migrating once per test session and cloning is what keeps per-test isolation
cheap: SQLite copies a template file, PostgreSQL runs ``CREATE DATABASE ...
TEMPLATE``.

The ``pgbouncer`` backend is PostgreSQL reached through a PgBouncer in
transaction mode: its URL carries ``benchledger_pooler=transaction``, and its
databases are created, cloned and dropped through the PgBouncer too (its
``[databases]`` must route any name to the server, e.g. ``* = host=... port=...``).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import sqlalchemy as sa

from benchledger.db import Database, engine_options, resolve_url
from benchledger.db.engine import split_pooler

#: ``pgbouncer``: PostgreSQL through a transaction-pooling PgBouncer.
BACKENDS = ("sqlite", "postgresql", "pgbouncer")
#: The backends that need a server URL.
SERVER_BACKENDS = ("postgresql", "pgbouncer")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresServer:
    """Creates and drops databases on a PostgreSQL server reached by ``admin_url``."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = resolve_url(admin_url)
        url, pooled = split_pooler(sa.make_url(self.admin_url))
        options = engine_options(url, transaction_pooling=pooled)
        self._admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", **options)

    def url_for(self, name: str) -> str:
        return sa.make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def create(self, name: str, template: str | None = None) -> str:
        with self._admin.connect() as connection:
            statement = f"CREATE DATABASE {_quoted(name)}"
            if template is not None:
                statement += f" TEMPLATE {_quoted(template)}"
            connection.exec_driver_sql(statement)
        return self.url_for(name)

    def drop(self, name: str) -> None:
        with self._admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")

    def disconnect(self, name: str) -> None:
        """End every other session on database ``name`` (a pooler keeps its server
        connections open after its clients left; a template must have none)."""
        with self._admin.connect() as connection:
            connection.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )

    def close(self) -> None:
        self._admin.dispose()


class DatabaseFactory:
    """Hands out fresh databases (migrated or empty) for one backend."""

    def __init__(self, backend: str, workdir: Path, postgres_url: str | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
        if backend in SERVER_BACKENDS and not postgres_url:
            raise ValueError(f"the {backend} backend needs a server URL")
        self.backend = backend
        self.workdir = workdir
        self._server = PostgresServer(postgres_url) if postgres_url else None
        self._prefix = f"bl_{uuid.uuid4().hex[:10]}"
        self._template: str | None = None
        self._created: list[str] = []

    def _new_name(self) -> str:
        return f"{self._prefix}_{len(self._created)}"

    def empty_url(self) -> str:
        """The URL of a new, empty database."""
        name = self._new_name()
        self._created.append(name)
        if self._server is None:
            return f"sqlite:///{self.workdir / (name + '.sqlite')}"
        return self._server.create(name)

    def migrated_url(self) -> str:
        """The URL of a new database already at head."""
        if self._template is None:
            self._template = self._make_template()
        name = self._new_name()
        self._created.append(name)
        if self._server is None:
            target = self.workdir / (name + ".sqlite")
            shutil.copyfile(self._template, target)
            return f"sqlite:///{target}"
        return self._server.create(name, template=self._template)

    def _make_template(self) -> str:
        name = f"{self._prefix}_template"
        if self._server is None:
            path = self.workdir / (name + ".sqlite")
            url = f"sqlite:///{path}"
        else:
            url = self._server.create(name)
        database = Database(url)
        try:
            database.upgrade()
        finally:
            database.dispose()
        if self._server is None:
            return str(path)
        if self.backend == "pgbouncer":
            # The pooler keeps its server connections to the template: a clone needs
            # the template to itself.
            self._server.disconnect(name)
        return name

    def drop(self, url: str) -> None:
        """Remove one database handed out by this factory."""
        name = sa.make_url(url).database
        if self._server is not None and name:
            self._server.drop(name)
            return
        if name:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(name + suffix).unlink(missing_ok=True)

    def close(self) -> None:
        if self._server is not None:
            if self._template is not None:
                self._server.drop(self._template)
            self._server.close()
