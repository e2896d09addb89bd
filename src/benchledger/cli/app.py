"""The ``benchledger`` group itself: its options and what they set up.

Imported by :mod:`benchledger.cli` inside the guard that turns a Ctrl-C while
the command line loads into one line and exit 130: everything this module does
at import (click's decorators, their gettext look-ups) runs under that guard.
"""

from __future__ import annotations

import os

import click

from benchledger.cli.group import LedgerGroup
from benchledger.cli.settings import SIGNING_KEY_ENV, SIGNING_KEY_FILE_ENV, Settings

URL_ENV = "BENCHLEDGER_DATABASE_URL"  # benchledger.db.URL_ENV, without importing it
# benchledger.cli.logs's, loaded when a command runs (test_log_format holds them equal)
LOG_FORMAT_ENV = "BENCHLEDGER_LOG_FORMAT"
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")

_COMMANDS = {
    "db": "benchledger.cli.db:db",
    "campaign": "benchledger.cli.campaign:campaign",
    "study": "benchledger.cli.study:study",
    "demo": "benchledger.cli.demo:demo",
    "serve": "benchledger.cli.serve:serve",
    "limits": "benchledger.cli.limits:limits",
    "work": "benchledger.cli.fleet:work",
}


@click.group(cls=LedgerGroup, lazy_commands=_COMMANDS)
@click.option(
    "--url",
    envvar=URL_ENV,
    default=None,
    metavar="URL",
    help=f"Database URL (env {URL_ENV}; default sqlite:///benchledger.db).",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what benchledger and Alembic do on stderr (-vv: also every SQL statement).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default=None,
    help="Log level for benchledger's and Alembic's loggers (overrides -v).",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    envvar=LOG_FORMAT_ENV,
    default="text",
    show_default=True,
    help=f"text, or json: one JSON object a line on stderr, for log collectors "
    f"(env {LOG_FORMAT_ENV}).",
)
@click.option(
    "--signing-key-file",
    envvar=SIGNING_KEY_FILE_ENV,
    default=None,
    metavar="PATH",
    help=f"Sign results with this key and accept only results signed by its keys "
    f"(hex; env {SIGNING_KEY_FILE_ENV}, or the key itself in {SIGNING_KEY_ENV}). "
    "See docs/signing.md.",
)
@click.version_option(package_name="benchledger")
@click.pass_context
def main(
    context: click.Context,
    url: str | None,
    verbose: int,
    log_level: str | None,
    log_format: str,
    signing_key_file: str | None,
) -> None:
    """A durable, auditable ledger of evaluation work.

    Start with `benchledger db upgrade`, then `benchledger campaign --help` or
    `benchledger study --help`; `benchledger demo` runs both end to end.
    """
    from benchledger.cli.logs import LogSettings, configure_logging

    logs = LogSettings(verbose, log_level and log_level.lower(), log_format.lower())
    configure_logging(logs)
    context.obj = Settings(
        url,
        logging=logs,
        signing_key_file=signing_key_file,
        signing_key=os.environ.get(SIGNING_KEY_ENV) or None,
    )
