"""The dashboard reaches services and value objects only; a missing browser under CI fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import benchledger

from . import conftest

PACKAGE = Path(benchledger.__file__).resolve().parent


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_dashboard_imports_no_repository_or_model() -> None:
    modules = sorted((PACKAGE / "dashboard").rglob("*.py"))
    assert modules
    for path in modules:
        for name in imported(path):
            assert not name.startswith(("benchledger.repositories", "benchledger.models")), (
                path.name,
                name,
            )


def test_the_view_services_leave_sql_to_their_repositories() -> None:
    for service, repository in (
        ("campaigns/views.py", "campaigns/views.py"),
        ("studies/views.py", "study_views.py"),
    ):
        for module in imported(PACKAGE / "services" / service):
            assert not module.startswith(("benchledger.models", "sqlalchemy")), (service, module)
        for module in imported(PACKAGE / "repositories" / repository):
            assert not module.startswith(("benchledger.services", "benchledger.dashboard"))


def test_the_assets_ship_in_the_package() -> None:
    from benchledger.dashboard import reference

    here = PACKAGE / "dashboard"
    for name in ("dashboard.css", "dashboard.js"):
        text = (here / "static" / name).read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text  # nothing from elsewhere
    templates = list((here / "templates").glob("*.html"))
    assert len(templates) >= 6
    for template in templates:
        text = template.read_text(encoding="utf-8")
        assert not any(f'{attr}="http' in text for attr in ("src", "href")), template.name
    assert reference.rows()  # the error reference is found (packaged or in the checkout)


def test_a_missing_browser_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(conftest, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        conftest.chromium_or_skip()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        conftest.chromium_or_skip()
