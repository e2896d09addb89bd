"""What the top-level options decided, passed to every command: the database to use."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from benchledger.cli.output import (
    DATABASE_MISSING,
    DATABASE_UNSUPPORTED,
    DATABASE_URL_INVALID,
    CommandError,
)

SUPPORTED = (
    "benchledger runs on SQLite (sqlite:///PATH) and PostgreSQL "
    "(postgresql+psycopg://USER:PASSWORD@HOST/DB, psycopg 3: pip install 'psycopg[binary]')"
)
#: Backends SQLAlchemy knows that benchledger does not run on.
_OTHER_BACKENDS = ("mysql", "mariadb", "oracle", "mssql")


def check_backend(url: str | None) -> None:
    """Refuse, in one line, a URL for a backend or driver benchledger does not support."""
    import sqlalchemy as sa

    from benchledger.db import resolve_url

    try:
        parsed = sa.make_url(resolve_url(url))
    except (sa.exc.ArgumentError, ValueError) as error:
        raise CommandError(
            DATABASE_URL_INVALID, f"the database URL is not usable: {error}"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in _OTHER_BACKENDS:
        raise CommandError(DATABASE_UNSUPPORTED, f"{backend} is not supported: {SUPPORTED}")
    if backend == "sqlite" and driver not in ("", "pysqlite"):
        raise CommandError(
            DATABASE_UNSUPPORTED, f"the sqlite+{driver} driver is not supported: {SUPPORTED}"
        )
    if backend in ("postgresql", "postgres") and driver != "psycopg":
        raise CommandError(
            DATABASE_UNSUPPORTED,
            f"{parsed.drivername}:// is not supported (benchledger is synchronous and "
            f"uses psycopg 3): write postgresql+psycopg://...; {SUPPORTED}",
        )


if TYPE_CHECKING:
    from benchledger.db import Database
    from benchledger.faults import Outage, OutagePolicy


class Settings:
    """What the top-level options decided, passed to every command."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def database(
        self,
        *,
        create: bool = False,
        check_schema: bool = True,
        outage: Outage | OutagePolicy | None = None,
    ) -> Database:
        """The database; refuses a SQLite file that does not exist unless ``create``.

        The schema check rides out a restart within ``outage`` (default: the
        library's start-up budget, a few seconds; ``campaign work`` passes the
        workers' five minutes). ``Database`` itself codes a bad URL
        (``ledger.database.url_invalid``, ``unsupported``, ``driver_missing``).
        """
        from benchledger.db import Database

        check_backend(self.url)
        database = Database(self.url)
        path = database.sqlite_path
        if path is not None and not create and not path.exists():
            database.dispose()
            raise CommandError(
                DATABASE_MISSING,
                f"no database at {path}: create it with `benchledger db upgrade`",
            )
        if check_schema:
            try:
                database.require_current_schema(outage=outage)
            except BaseException:
                database.dispose()
                raise
        return database


pass_settings = click.make_pass_decorator(Settings)
