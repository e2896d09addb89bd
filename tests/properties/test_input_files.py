"""Hostile JSON input files are refused by the real command line in one coded line.

Deep nesting, lone surrogates, duplicate keys and over-long integers in a
``--policy``, ``--suite``, ``--spec``, material or evidence file: exit 1,
``error: ledger.input.json_invalid: ...`` on stderr, no traceback, and the
database is unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchledger.cli import main
from benchledger.db import Database
from benchledger.examples import example_policy, example_suite

from .helpers import dump

HOSTILE = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "deep object": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested 65 levels": "[" * 65 + "]" * 65,
    "lone surrogate": '{"name": "\\ud800"}',
    "lone surrogate key": '{"\\udfff": 1}',
    "duplicate keys": '{"schema": "a", "schema": "b", "cases": []}',
    "duplicate keys deep inside": '{"a": [{"b": 1, "c": 2, "b": 3}]}',
    "long integer": '{"x": ' + "9" * 5_000 + "}",
    "NaN": '{"x": NaN}',
}

COMMANDS = {
    "campaign create --policy": lambda f, good: [
        "campaign",
        "create",
        "--policy",
        f,
        "--suite",
        good,
    ],
    "campaign create --suite": lambda f, good: [
        "campaign",
        "create",
        "--policy",
        good,
        "--suite",
        f,
    ],
    "study create --spec": lambda f, _good: ["study", "--actor", "olivia", "create", "--spec", f],
    "study material": lambda f, _good: ["study", "--actor", "olivia", "material", f],
    "study evidence": lambda f, _good: ["study", "--actor", "olivia", "evidence", f],
}


def _refused_in_one_line(exit_code: int, stdout: str, stderr: str) -> str:
    assert exit_code == 1, (exit_code, stderr[-500:])
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr[-2000:]
    assert lines[0].startswith("error: ledger.input.json_invalid: "), lines[0]
    assert "Traceback" not in stderr and len(lines[0]) < 400
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_hostile_file_is_refused_by_every_command(
    command: str, ledger_db: Database, tmp_path: Path
) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(example_policy(example_suite(cases=1)).as_payload()), "utf-8")
    before = dump(ledger_db)
    for name, text in HOSTILE.items():
        path = tmp_path / f"{name.replace(' ', '-')}.json"
        path.write_text(text, encoding="utf-8")
        argv = ["--url", ledger_db.url, *COMMANDS[command](str(path), str(good))]
        result = CliRunner().invoke(main, argv, catch_exceptions=False, prog_name="benchledger")
        line = _refused_in_one_line(result.exit_code, result.stdout, result.stderr)
        assert str(path) in line, (name, line)
    assert dump(ledger_db) == before


def test_the_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    reasons = {
        "deep": "nested too deeply",
        "nested 65 levels": "nested deeper than 64 levels",
        "lone surrogate": "lone surrogate",
        "lone surrogate key": "lone surrogate",
        "duplicate keys": "duplicate key 'schema'",
        "duplicate keys deep inside": "duplicate key 'b'",
        "long integer": "more than 4300 digits",
        "NaN": "NaN is not allowed",
    }
    for name, reason in reasons.items():
        path = tmp_path / "policy.json"
        path.write_text(HOSTILE[name], encoding="utf-8")
        argv = ["--url", "sqlite:///" + str(tmp_path / "none.db"), "campaign", "create"]
        argv += ["--policy", str(path), "--suite", str(path)]
        result = CliRunner().invoke(main, argv, catch_exceptions=False, prog_name="benchledger")
        assert reason in _refused_in_one_line(result.exit_code, result.stdout, result.stderr)


def test_a_deep_file_in_a_real_process_is_one_line(tmp_path: Path) -> None:
    """The installed command, its own interpreter and stack: no RecursionError traceback."""
    deep = tmp_path / "deep.json"
    deep.write_text(HOSTILE["deep"], encoding="utf-8")
    spec = ["study", "--actor", "olivia", "create", "--spec", str(deep)]
    script = "import sys; from benchledger.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", script, "--url", "sqlite:///" + str(tmp_path / "x.db"), *spec],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    _refused_in_one_line(done.returncode, done.stdout, done.stderr)


def test_the_same_key_in_two_objects_is_fine(tmp_path: Path) -> None:
    from benchledger.cli.output import read_json_file

    path = tmp_path / "ok.json"
    path.write_text('[{"a": 1}, {"a": 2}, {"b": {"a": 3}}]', encoding="utf-8")
    assert read_json_file(str(path), "test") == [{"a": 1}, {"a": 2}, {"b": {"a": 3}}]
    path.write_text("[" * 64 + "]" * 64, encoding="utf-8")
    read_json_file(str(path), "test")  # 64 levels: the deepest allowed
