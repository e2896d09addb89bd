"""The ``benchledger`` command line.

Conventions (see ``docs/cli.md``):

- ``--url`` (or ``BENCHLEDGER_DATABASE_URL``) names the database; the default
  is ``sqlite:///benchledger.db``. Only ``db upgrade`` and ``demo`` create a
  database; every other command refuses a SQLite file that does not exist.
- Every read command takes ``--json`` and then prints exactly one JSON
  document on stdout (the value objects' payloads), nothing else.
- Every refusal is one line on stderr, ``error: <code>: <message>``, and a
  non-zero exit status: 1 for an error, 2 for a usage error, 3/4 for
  ``db check`` behind/ahead, 130 when interrupted. No traceback
  (``BENCHLEDGER_DEBUG=1`` re-raises for one).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

import click
import sqlalchemy as sa
from rich.console import Console

from benchledger.db import URL_ENV, Database, head_revision
from benchledger.errors import SCHEMA_AHEAD, SCHEMA_BEHIND, LedgerError

F = TypeVar("F", bound=Callable[..., Any])

DEBUG_ENV = "BENCHLEDGER_DEBUG"

# -- error codes of the command line itself ------------------------------------------

CLI_USAGE = "ledger.cli.usage"
CLI_INTERRUPTED = "ledger.cli.interrupted"
FILE_MISSING = "ledger.input.file_missing"
FILE_UNREADABLE = "ledger.input.file_unreadable"
JSON_INVALID = "ledger.input.json_invalid"
EVALUATOR_INVALID = "ledger.input.evaluator_invalid"
DATABASE_MISSING = "ledger.database.missing"
DATABASE_UNAVAILABLE = "ledger.database.unavailable"
DATABASE_URL_INVALID = "ledger.database.url_invalid"
DATABASE_ERROR = "ledger.database.error"

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SCHEMA_BEHIND = 3
EXIT_SCHEMA_AHEAD = 4
EXIT_INTERRUPTED = 130


class CommandError(click.ClickException):
    """A refusal shown as one line: ``error: <code>: <message>``."""

    def __init__(self, code: str, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code
        self.status = exit_code
        # click reads ``exit_code`` (a class variable there) when it shows the error itself.
        setattr(self, "exit_code", exit_code)  # noqa: B010

    def format_message(self) -> str:
        return f"{self.code}: {_one_line(self.message)}"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _ledger_error(error: LedgerError) -> CommandError:
    message = error.message if error.message and error.message != error.code else ""
    return CommandError(error.code, message or _default_message(error.code))


def _default_message(code: str) -> str:
    """A short human reading of a bare code (campaign errors carry no text)."""
    return code.rsplit(".", 1)[-1].replace("_", " ")


def _database_error(error: sa.exc.SQLAlchemyError) -> CommandError:
    if isinstance(error, sa.exc.ArgumentError | sa.exc.NoSuchModuleError):
        return CommandError(DATABASE_URL_INVALID, f"the database URL is not usable: {error}")
    if isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError):
        detail = getattr(error, "orig", None) or error
        return CommandError(DATABASE_UNAVAILABLE, f"cannot use the database: {detail}")
    detail = getattr(error, "orig", None) or error
    return CommandError(DATABASE_ERROR, f"the database refused an operation: {detail}")


class LedgerGroup(click.Group):
    """A click group that turns every known failure into one ``error:`` line."""

    def invoke(self, ctx: click.Context) -> Any:
        if os.environ.get(DEBUG_ENV):
            return super().invoke(ctx)
        try:
            return super().invoke(ctx)
        except LedgerError as error:
            raise _ledger_error(error) from None
        except sa.exc.SQLAlchemyError as error:
            raise _database_error(error) from None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except CommandError as error:
            error.show()
            sys.exit(error.status)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else "benchledger"
            message = f"{_one_line(error.format_message())} (see `{where} --help`)"
            CommandError(CLI_USAGE, message).show()
            sys.exit(EXIT_USAGE)
        except click.ClickException as error:
            CommandError(CLI_USAGE, error.format_message()).show()
            sys.exit(error.exit_code)
        except click.Abort:
            CommandError(CLI_INTERRUPTED, "interrupted").show()
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(result if isinstance(result, int) else 0)


# -- shared plumbing ------------------------------------------------------------------


class Settings:
    """What the top-level options decided, passed to every command."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def database(self, *, create: bool = False, check_schema: bool = True) -> Database:
        """The database; refuses a SQLite file that does not exist unless ``create``."""
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


def json_option(function: F) -> F:
    """``--json``: print the value as one JSON document instead of tables."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document (the value objects' payloads) instead of tables.",
    )(function)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False))


def console() -> Console:
    """A rich console on stdout; plain (no colour, wide) when stdout is not a terminal."""
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 120)


def read_json_file(path: str, what: str) -> Any:
    """Parse a JSON file, refusing a missing, unreadable or malformed one in one line."""
    file = Path(path)
    if not file.exists():
        raise CommandError(FILE_MISSING, f"{what} file {path} does not exist")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CommandError(FILE_UNREADABLE, f"cannot read {what} file {path}: {reason}") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as error:
        raise CommandError(JSON_INVALID, f"{what} file {path} is not valid JSON: {error}") from None


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


def fail(code: str, message: str, exit_code: int = EXIT_ERROR) -> NoReturn:
    raise CommandError(code, message, exit_code)


# -- the command tree -------------------------------------------------------------------


@click.group(cls=LedgerGroup)
@click.option(
    "--url",
    envvar=URL_ENV,
    default=None,
    metavar="URL",
    help=f"Database URL (env {URL_ENV}; default sqlite:///benchledger.db).",
)
@click.version_option(package_name="benchledger")
@click.pass_context
def main(context: click.Context, url: str | None) -> None:
    """A durable, auditable ledger of evaluation work."""
    context.obj = Settings(url)


# -- db ----------------------------------------------------------------------------------


@main.group(cls=LedgerGroup)
def db() -> None:
    """Schema management: upgrade, current revision, check."""


def _schema_state(database: Database) -> dict[str, Any]:
    path = database.sqlite_path
    current = None if path is not None and not path.exists() else database.current_revision()
    head = head_revision()
    if current is None:
        state = "behind"
    elif current == head:
        state = "current"
    else:
        try:
            database.require_current_schema()
            state = "current"
        except LedgerError as error:
            state = "ahead" if error.code == SCHEMA_AHEAD else "behind"
    return {"url": _display_url(database), "current": current, "head": head, "state": state}


def _display_url(database: Database) -> str:
    return sa.make_url(database.url).render_as_string(hide_password=True)


@db.command("upgrade")
@pass_settings
def db_upgrade(settings: Settings) -> None:
    """Create or upgrade the schema to head (adopting a legacy seed database)."""
    database = settings.database(create=True, check_schema=False)
    try:
        database.upgrade()
        click.echo(f"{_display_url(database)} at {database.current_revision()} (head)")
    finally:
        database.dispose()


@db.command("current")
@json_option
@pass_settings
def db_current(settings: Settings, as_json: bool) -> None:
    """Show the schema revision of the database and this version's head."""
    database = settings.database(create=True, check_schema=False)
    try:
        state = _schema_state(database)
    finally:
        database.dispose()
    if as_json:
        emit_json(state)
        return
    click.echo(
        f"{state['url']}: at {state['current'] or 'nothing (empty)'}, "
        f"head {state['head']} ({state['state']})"
    )


@db.command("check")
@json_option
@pass_settings
def db_check(settings: Settings, as_json: bool) -> None:
    """Exit 0 when the schema is at head; 3 when behind, 4 when ahead."""
    database = settings.database(create=True, check_schema=False)
    try:
        state = _schema_state(database)
    finally:
        database.dispose()
    if as_json:
        emit_json(state)
    if state["state"] == "behind":
        fail(
            SCHEMA_BEHIND,
            f"the schema is at {state['current'] or 'nothing'}, behind head {state['head']}: "
            "run `benchledger db upgrade`",
            EXIT_SCHEMA_BEHIND,
        )
    if state["state"] == "ahead":
        fail(
            SCHEMA_AHEAD,
            f"the schema is at {state['current']}, ahead of this benchledger's head "
            f"{state['head']}: upgrade benchledger",
            EXIT_SCHEMA_AHEAD,
        )
    if not as_json:
        click.echo(f"{state['url']}: at head {state['head']}")


# -- demo ----------------------------------------------------------------------------------


@main.command()
@pass_settings
def demo(settings: Settings) -> None:
    """Create or upgrade a ledger and show its schema revision."""
    database = settings.database(create=True, check_schema=False)
    try:
        database.upgrade()
        click.echo(f"ledger {_display_url(database)} at revision {database.current_revision()}")
    finally:
        database.dispose()
