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

import click

from benchledger.cli.group import LedgerGroup
from benchledger.cli.settings import Settings

URL_ENV = "BENCHLEDGER_DATABASE_URL"  # benchledger.db.URL_ENV, without importing it

_COMMANDS = {
    "db": "benchledger.cli.db:db",
    "campaign": "benchledger.cli.campaign:campaign",
    "study": "benchledger.cli.study:study",
    "demo": "benchledger.cli.demo:demo",
}


@click.group(cls=LedgerGroup, lazy_commands=_COMMANDS)
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


__all__ = ["main"]
