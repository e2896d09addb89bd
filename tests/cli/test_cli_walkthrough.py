"""docs/cli.md's "A whole study from the shell" runs to the end, as written, in bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def walkthrough() -> str:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"^A whole study from the shell.*?```sh\n(.*?)```", text, re.M | re.S)
    assert match is not None, "docs/cli.md lost its shell study walkthrough"
    return match.group(1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_shell_study_walkthrough_runs_to_the_end(tmp_path: Path) -> None:
    """About 15 benchledger processes (~1 s each): the one test that runs the CLI as a user."""
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "benchledger").exists()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "BENCHLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'study.db'}",
    }
    env.pop("BENCHLEDGER_ACTOR", None)
    subprocess.run(["benchledger", "db", "upgrade"], cwd=tmp_path, env=env, check=True)
    # No pipefail: `... | head -1` may end the writer early, as it does for anyone running it.
    script = "set -eu\n" + walkthrough()
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "evidence.json").exists()
    assert "state stopped" in result.stdout
