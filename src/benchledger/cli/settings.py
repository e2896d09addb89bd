"""What the top-level options decided, passed to every command: the database to use."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from benchledger.cli.output import DATABASE_MISSING, DATABASE_URL_INVALID, CommandError

if TYPE_CHECKING:
    from benchledger.db import Database


class Settings:
    """What the top-level options decided, passed to every command."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def database(self, *, create: bool = False, check_schema: bool = True) -> Database:
        """The database; refuses a SQLite file that does not exist unless ``create``."""
        import sqlalchemy as sa

        from benchledger.db import Database

        try:
            database = Database(self.url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as error:
            raise CommandError(
                DATABASE_URL_INVALID, f"the database URL is not usable: {error}"
            ) from None
        path = database.sqlite_path
        if path is not None and not create and not path.exists():
            database.dispose()
            raise CommandError(
                DATABASE_MISSING,
                f"no database at {path}: create it with `benchledger db upgrade`",
            )
        if check_schema:
            database.require_current_schema()
        return database


pass_settings = click.make_pass_decorator(Settings)
