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

Modules: :mod:`~benchledger.cli.output` (refusals, ``--json``, the console),
:mod:`~benchledger.cli.group` (the group class: lazy subcommands, exit
statuses), :mod:`~benchledger.cli.settings` (the database option),
:mod:`~benchledger.cli.views` (rich tables of value objects), and one module
per command group: ``db``, ``campaign``, ``study``, ``demo``.

Importing this package loads click and nothing heavy: each command group is
imported when it is looked up, and commands import the database, services and
study code when they run. A Ctrl-C at any moment before a command takes over
SIGINT therefore exits 130 with one line, never a traceback.
"""

from __future__ import annotations

import sys

try:
    import click

    from benchledger.cli.group import LedgerGroup
    from benchledger.cli.settings import Settings
except KeyboardInterrupt:  # Ctrl-C while the command line itself loads: one line, exit 130
    sys.stderr.write("error: ledger.cli.interrupted: interrupted\n")
    raise SystemExit(130) from None

URL_ENV = "BENCHLEDGER_DATABASE_URL"  # benchledger.db.URL_ENV, without importing it

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
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default=None,
    help="Log level for benchledger's and Alembic's loggers (overrides -v).",
)
@click.version_option(package_name="benchledger")
@click.pass_context
def main(context: click.Context, url: str | None, verbose: int, log_level: str | None) -> None:
    """A durable, auditable ledger of evaluation work.

    Start with `benchledger db upgrade`, then `benchledger campaign --help` or
    `benchledger study --help`; `benchledger demo` runs both end to end.
    """
    if verbose or log_level:
        configure_logging(verbose, log_level)
    context.obj = Settings(url)


def configure_logging(verbose: int, log_level: str | None) -> None:
    """Log benchledger and Alembic on stderr: INFO (-v), DEBUG with every SQL statement
    (-vv), or ``--log-level``. The command's own handler, replacing one set earlier."""
    import logging

    level = getattr(logging, log_level.upper()) if log_level else logging.INFO
    if verbose >= 2 and not log_level:
        level = logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name("benchledger.cli")
    handler.setFormatter(logging.Formatter("%(levelname)-5.5s [%(name)s] %(message)s"))
    loggers = {"benchledger": level, "alembic": level}
    if level <= logging.DEBUG:
        loggers["sqlalchemy.engine"] = logging.INFO
    else:  # Alembic's plugin registry says hello at INFO on every run
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    for name, logger_level in loggers.items():
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == "benchledger.cli"]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(logger_level)
        logger.propagate = False


__all__ = ["main"]
