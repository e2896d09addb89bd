"""The command line's output conventions: one-line refusals, exit statuses, ``--json``.

- Every refusal is one line on stderr, ``error: <code>: <message>``, and a
  non-zero exit status (:class:`CommandError`, :func:`fail`).
- ``--json`` (:func:`json_option`) prints exactly one JSON document on stdout.
- Tables go to a rich :func:`console`, plain when stdout is not a terminal.

Only click and the standard library are imported here: this module is loaded
before any command runs, so it must stay cheap (see ``benchledger.cli``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])

# -- error codes of the command line itself ------------------------------------------

CLI_USAGE = "ledger.cli.usage"
CLI_INTERRUPTED = "ledger.cli.interrupted"
FILE_MISSING = "ledger.input.file_missing"
FILE_UNREADABLE = "ledger.input.file_unreadable"
JSON_INVALID = "ledger.input.json_invalid"
EVALUATOR_INVALID = "ledger.input.evaluator_invalid"
DATABASE_MISSING = "ledger.database.missing"
# The library raises these itself (benchledger.errors: Database, AsyncDatabase, the
# start-up checks); spelled here too so that loading the command line imports no more
# of benchledger (tests/cli/test_database_codes.py holds the two spellings equal).
DATABASE_UNAVAILABLE = "ledger.database.unavailable"
DATABASE_URL_INVALID = "ledger.database.url_invalid"
DATABASE_ERROR = "ledger.database.error"
DATABASE_UNSUPPORTED = "ledger.database.unsupported"
DATABASE_DRIVER_MISSING = "ledger.database.driver_missing"
CONFIRMATION_REQUIRED = "ledger.input.confirmation_required"

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
        return f"{self.code}: {one_line(self.message)}"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(code: str, message: str, exit_code: int = EXIT_ERROR) -> NoReturn:
    raise CommandError(code, message, exit_code)


#: Campaign errors carry no text (only a code): what to tell a person instead.
_MESSAGES = {
    "benchmark.campaign.not_found": "no such campaign in this database",
    "benchmark.campaign.policy_unregistered": (
        "the campaign has no stored policy and suite (a legacy campaign): register it first"
    ),
    "benchmark.campaign.policy_invalid": "the policy is not a valid campaign policy",
    "benchmark.campaign.suite_invalid": "the suite is not a valid suite manifest",
    "benchmark.campaign.suite_mismatch": "the policy's suite_sha256 is not this suite's sha256",
    "benchmark.campaign.attempts_invalid": "max attempts must be an integer from 1 to 20",
    "benchmark.campaign.attempts_mismatch": (
        "the campaign already exists with another max attempts"
    ),
    "benchmark.campaign.validity_expired": "the policy's valid_until has passed",
    "benchmark.campaign.report_missing": (
        "the report is not finalized yet: run `benchledger campaign work` to finish the campaign"
    ),
    "benchmark.campaign.incomplete": "not every item of the campaign has succeeded",
    "benchmark.campaign.state_invalid": "stored campaign rows fail verification",
    "benchmark.campaign.report_invalid": "the stored report does not match its results",
    "benchmark.campaign.report_state_invalid": "the report state contradicts the work items",
    "benchmark.campaign.duration_invalid": "a duration must be > 0 and at most one day",
    "benchmark.campaign.retry_invalid": "retry settings are invalid (base must not exceed max)",
    "benchmark.campaign.identity_invalid": "the worker id is not a valid identifier",
    "benchmark.campaign.stale_threshold_invalid": "--stale-after must be > 0 and at most a year",
    "benchmark.campaign.time_invalid": "a time must be finite, non-negative epoch seconds",
}


def _default_message(code: str) -> str:
    """A short human reading of a bare code."""
    return _MESSAGES.get(code) or code.rsplit(".", 1)[-1].replace("_", " ")


def command_error(error: BaseException) -> CommandError | None:
    """The one-line refusal for a ledger or database error; ``None`` for anything else.

    SQLAlchemy is looked at only when it is loaded: if it is not, the error is
    none of its own.
    """
    from benchledger.errors import LedgerError

    if isinstance(error, LedgerError):
        message = error.message if error.message and error.message != error.code else ""
        return CommandError(error.code, message or _default_message(error.code))
    if "sqlalchemy" not in sys.modules:
        return None
    import sqlalchemy as sa

    if isinstance(error, sa.exc.ArgumentError | sa.exc.NoSuchModuleError):
        return CommandError(DATABASE_URL_INVALID, f"the database URL is not usable: {error}")
    if isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError):
        detail = getattr(error, "orig", None) or error
        return CommandError(DATABASE_UNAVAILABLE, f"cannot use the database: {detail}")
    if isinstance(error, sa.exc.SQLAlchemyError):
        detail = getattr(error, "orig", None) or error
        return CommandError(DATABASE_ERROR, f"the database refused an operation: {detail}")
    return None


# -- reading input ----------------------------------------------------------------------


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
        value = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_parse_int,
            object_pairs_hook=_unique_keys,
        )
        _check_plain(value)
    except RecursionError:
        raise CommandError(
            JSON_INVALID, f"{what} file {path} is not valid JSON: nested too deeply"
        ) from None
    except (json.JSONDecodeError, ValueError) as error:
        raise CommandError(JSON_INVALID, f"{what} file {path} is not valid JSON: {error}") from None
    return value


#: The deepest nesting of arrays and objects an input file may have.
MAX_JSON_DEPTH = 64
#: The most digits an integer may have (what the ledger's canonical JSON encodes).
MAX_INT_DIGITS = 4_300
#: How much of an offending key a refusal quotes.
_QUOTED = 40


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refusing a key that appears twice (JSON parsers disagree on which wins)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _item in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key[:_QUOTED]!a}")
            seen.add(key)
    return value


def _check_plain(value: Any) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` and text that is not UTF-8.

    ``\\ud800``-style escapes decode to lone surrogates, which no UTF-8 text can
    hold. Iterative, so that a deep document cannot exhaust the stack here.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _require_utf8(item)
        elif isinstance(item, list | dict):
            if depth >= MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                for key in item:
                    _require_utf8(key)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def _require_utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "text holds a lone surrogate (an unpaired \\ud800-\\udfff escape)"
        ) from None


# -- writing output ---------------------------------------------------------------------


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


def emit_document(value: object) -> None:
    """A study value object as its JSON document."""
    from benchledger.domain.study_documents import to_document

    emit_json(to_document(value))


def console() -> Console:
    """A rich console on stdout; plain (no colour, 160 columns) when stdout is not a terminal."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def fmt_time(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
