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
statuses), :mod:`~benchledger.cli.settings` (the database, the signing keys),
:mod:`~benchledger.cli.logs` (``-v``, ``--log-level``, ``--log-format``),
:mod:`~benchledger.cli.views` (rich tables of value objects), and one module
per command group: ``db``, ``campaign``, ``study``, ``demo``.

Importing this package loads click and nothing heavy: each command group is
imported when it is looked up, and commands import the database, services and
study code when they run. The group itself is defined in
:mod:`~benchledger.cli.app`, imported here under a guard: a Ctrl-C at any
moment before a command takes over SIGINT (click's decorators included)
therefore exits 130 with one line, never a traceback.
"""

from __future__ import annotations

import sys

try:
    from benchledger.cli.app import LOG_FORMAT_ENV, LOG_FORMATS, LOG_LEVELS, URL_ENV, main
except KeyboardInterrupt:  # Ctrl-C while the command line itself loads: one line, exit 130
    sys.stderr.write("error: ledger.cli.interrupted: interrupted\n")
    raise SystemExit(130) from None

__all__ = ["LOG_FORMATS", "LOG_FORMAT_ENV", "LOG_LEVELS", "URL_ENV", "main"]
