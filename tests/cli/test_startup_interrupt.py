"""Ctrl-C while a command starts up (parsing, importing SQLAlchemy, Alembic, services).

Until a command installs a SIGINT handler of its own, a Ctrl-C ends the
command with exit 130 and one ``error: ledger.cli.interrupted: ...`` line,
never a traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchledger.cli.settings import Settings
from benchledger.db import Database

from .helpers import Invoke

BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))
INTERRUPTED = "error: ledger.cli.interrupted: interrupted"


def test_a_keyboard_interrupt_inside_a_command_exits_130_in_one_line(
    cli: Invoke, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def interrupted(self: Settings, **_: object) -> Database:
        raise KeyboardInterrupt

    monkeypatch.setattr(Settings, "database", interrupted)
    result = cli("db", "current", url=f"sqlite:///{tmp_path / 'ledger.db'}")
    assert result.exit_code == 130
    assert result.stderr.splitlines() == [INTERRUPTED]
    assert result.stdout == ""


def test_ctrl_c_while_the_groups_options_are_defined_is_one_line() -> None:
    """The interrupt lands in click's decorators of the group (their gettext look-up
    loads the locale module on first use): a window the import guard must cover too."""
    script = (
        "import gettext\n"
        "def interrupted(*_args):\n"
        "    raise KeyboardInterrupt\n"
        "gettext.dgettext = interrupted\n"
        "from benchledger.cli import main\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == [INTERRUPTED]


def _interrupt_after(url: str, delay: float) -> tuple[int, str]:
    process = subprocess.Popen(
        [BENCHLEDGER, "--url", url, "db", "current"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(delay)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err


def _before_main(err: str) -> bool:
    """A traceback of an interrupt that came before benchledger could handle it.

    That is: while Python started, or while the entry point imported click (the
    first line of ``benchledger.cli``). Any traceback through another line of
    benchledger's (an import of SQLAlchemy, Alembic, a service; ``main()``) is a
    failure.
    """
    frames = re.findall(r'File "([^"]+)", line \d+, in [^\n]*\n\s*([^\n]*)', err)
    ours = [(path, line) for path, line in frames if f"{os.sep}benchledger{os.sep}" in path]
    return (
        all(
            line.strip() == "import click" or path.endswith(f"benchledger{os.sep}__init__.py")
            for path, line in ours
        )
        and "main()" not in err
    )


@pytest.mark.slow
def test_ctrl_c_while_a_command_starts_never_prints_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    outcomes: list[int] = []
    # Different moments of start-up: the delays only spread the interrupts; whatever
    # moment each one lands on, the outcome must be a clean one.
    for delay in (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6):
        code, err = _interrupt_after(url, delay)
        if "Traceback" in err and _before_main(err):
            continue
        assert "Traceback" not in err, f"after {delay} s:\n{err}"
        assert code in (0, 130, -signal.SIGINT), f"after {delay} s: exit {code}\n{err}"
        if code == 130:
            assert err.splitlines()[-1] == INTERRUPTED, err
        outcomes.append(code)
    assert outcomes, "every interrupt landed before main() ran"
