"""Under CI=true a backend left out of the run is an error, never a silent skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _collect(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
         str(TESTS / "chaos")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
        cwd=TESTS.parent,
    )  # fmt: skip


def test_ci_refuses_a_run_without_postgresql() -> None:
    done = _collect(
        CI="true",
        BENCHLEDGER_TEST_BACKENDS="sqlite",
        BENCHLEDGER_TEST_URL="postgresql+psycopg://postgres@127.0.0.1:1/unused",
    )
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]  # a usage error
    said = done.stdout + done.stderr
    assert "leave out" in said and "postgresql" in said


def test_outside_ci_a_sqlite_run_is_allowed() -> None:
    done = _collect(CI="false", BENCHLEDGER_TEST_BACKENDS="sqlite")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
