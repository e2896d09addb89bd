"""The README's quick starts run as written (each at most 20 lines)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_starts() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    sections = re.findall(r"^## (Quick start[^\n]*)\n+```python\n(.*?)```", text, re.M | re.S)
    return [(title, code) for title, code in sections]


def test_there_is_a_quick_start_per_domain() -> None:
    titles = [title for title, _ in quick_starts()]
    assert titles == ["Quick start: benchmark campaigns", "Quick start: experiment studies"]
    for title, code in quick_starts():
        assert len(code.strip().splitlines()) <= 20, title


def test_the_quick_starts_run_and_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run as written, then again on the same ledger.db: every write replays (the README
    says writes are idempotent per key), and the second run prints what the first did."""
    monkeypatch.chdir(tmp_path)
    printed = []
    for _ in range(2):
        for title, code in quick_starts():
            exec(compile(code, f"README: {title}", "exec"), {"__name__": "__readme__"})
        printed.append(capsys.readouterr().out)
    assert (tmp_path / "ledger.db").exists()
    assert printed[0] == printed[1]
    assert "succeeded': 40" in printed[0]


def test_the_readme_says_how_to_reach_the_demo_database() -> None:
    text = README.read_text(encoding="utf-8")
    assert ".venv/bin/benchledger --url sqlite:///demo.db" in text
