"""Helpers of the command-line tests: run ``benchledger`` in-process against a real database,
and check what it printed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from click.testing import CliRunner, Result

from benchledger.cli import main

Invoke = Callable[..., Result]


def invoke_cli(*args: str, url: str | None = None, env: dict[str, str] | None = None) -> Result:
    """Run ``benchledger [--url URL] ARGS`` in this process and return click's result."""
    argv = (["--url", url] if url is not None else []) + list(args)
    return CliRunner().invoke(main, argv, env=env, catch_exceptions=False, prog_name="benchledger")


def ok(result: Result) -> Result:
    """Assert success and return the result (its stdout is ``result.stdout``)."""
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.output}"
    return result


def json_of(result: Result) -> Any:
    ok(result)
    return json.loads(result.stdout)


def refused(result: Result, code: str, exit_code: int = 1, *, after_progress: bool = False) -> str:
    """Assert a one-line ``error: <code>: ...`` refusal on stderr, nothing on stdout.

    ``after_progress``: the command printed progress lines on stderr before
    the error line (``campaign work``); the error is then its last line.
    """
    assert result.exit_code == exit_code, f"exit {result.exit_code}\n{result.output}"
    lines = result.stderr.splitlines()
    if after_progress:
        assert not any(line.startswith("error:") for line in lines[:-1]), result.stderr
        lines = lines[-1:]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]
