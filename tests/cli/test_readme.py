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


def test_the_quick_starts_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for title, code in quick_starts():
        exec(compile(code, f"README: {title}", "exec"), {"__name__": "__readme__"})
    assert (tmp_path / "ledger.db").exists()
