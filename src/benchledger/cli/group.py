"""The click group of every benchledger command: lazy subcommands, one-line refusals.

Subcommands are named with the module that defines them and imported only when
they are looked up, so that ``import benchledger.cli`` loads click and little
else, and a Ctrl-C while a command's modules load is handled like any other.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import click

from benchledger.cli.output import (
    CLI_INTERRUPTED,
    CLI_USAGE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CommandError,
    command_error,
    one_line,
)

DEBUG_ENV = "BENCHLEDGER_DEBUG"


class LedgerGroup(click.Group):
    """A click group that turns every known failure into one ``error:`` line.

    ``lazy_commands`` maps a subcommand's name to ``"module:attribute"``,
    imported the first time the subcommand is looked up.
    """

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("no_args_is_help", True)  # `benchledger campaign` shows its help
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is not None and cmd_name not in self.commands:
            module_name, attribute = target.split(":")
            command = getattr(importlib.import_module(module_name), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise click.Abort from None
        except Exception as error:
            refusal = None if os.environ.get(DEBUG_ENV) else command_error(error)
            if refusal is None:
                raise
            raise refusal from None

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
        # A Ctrl-C before a command installs a handler of its own (while click
        # parses, while a command's modules load, while an error is shown) ends
        # the same way as one click sees: one line, exit 130, no traceback.
        try:
            result = self._main(args, prog_name, complete_var, **extra)
        except KeyboardInterrupt:
            _interrupted()
        sys.exit(result if isinstance(result, int) else 0)

    def _main(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        **extra: Any,
    ) -> Any:
        try:
            return super().main(args, prog_name, complete_var, False, **extra)
        except CommandError as error:
            error.show()
            sys.exit(error.status)
        except click.exceptions.NoArgsIsHelpError as error:
            # A group named without a subcommand: its help, on stdout, is the answer.
            click.echo(
                error.ctx.get_help()
                if error.ctx is not None
                else self.get_help(click.Context(self))
            )
            sys.exit(0)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else "benchledger"
            message = f"{one_line(error.format_message())} (see `{where} --help`)"
            CommandError(CLI_USAGE, message).show()
            sys.exit(EXIT_USAGE)
        except click.ClickException as error:
            CommandError(CLI_USAGE, error.format_message()).show()
            sys.exit(error.exit_code)
        except click.Abort:
            _interrupted()


def _interrupted() -> NoReturn:
    CommandError(CLI_INTERRUPTED, "interrupted").show()
    sys.exit(EXIT_INTERRUPTED)
