"""``import benchledger`` is cheap (names load on first use); the CLI loads what a command needs."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import benchledger

INIT = Path(benchledger.__file__)


def loaded_after(statement: str) -> set[str]:
    """The benchledger modules a fresh interpreter holds after running ``statement``."""
    code = (
        f"import sys; {statement}; "
        "print(__import__('json').dumps(sorted(m for m in sys.modules "
        "if m == 'benchledger' or m.startswith('benchledger.'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(result.stdout))


def test_import_benchledger_imports_no_service() -> None:
    assert loaded_after("import benchledger") == {"benchledger"}


def test_a_name_imports_only_its_own_module() -> None:
    loaded = loaded_after("import benchledger; benchledger.CampaignPolicy")
    assert "benchledger.domain.campaign" in loaded
    assert not any(name.startswith("benchledger.services") for name in loaded)


def test_the_cli_does_not_import_the_campaign_service_or_the_worker_pool() -> None:
    loaded = loaded_after("import benchledger.cli")
    assert not {"benchledger.services.campaigns", "benchledger.workpool"} & loaded


def test_every_public_name_resolves() -> None:
    code = (
        "import benchledger as bl; "
        "missing = [n for n in bl.__all__ if getattr(bl, n, None) is None]; "
        "assert not missing, missing; "
        "assert set(bl.__all__) <= set(dir(bl)); print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "ok", result.stderr
    for name in benchledger.__all__:
        value = getattr(benchledger, name)
        if name != "__version__":
            assert value.__name__ == name  # the public name is the object's own


def test_the_version_is_the_installed_distributions() -> None:
    """``pyproject.toml`` holds the version once; the package reads it from the metadata."""
    from importlib.metadata import version

    assert benchledger.__version__ == version("benchledger")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", benchledger.__version__)
    assert '__version__ = "' not in INIT.read_text(encoding="utf-8")


def test_unknown_names_raise_attribute_error() -> None:
    try:
        benchledger.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("an unknown name resolved")
    assert not hasattr(benchledger, "_not_exported")


def test_type_checking_imports_all_and_exports_agree() -> None:
    """Type checkers see exactly the names ``__getattr__`` serves, from the same modules."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    typed = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    exports = benchledger._EXPORTS
    assert typed == exports
    assert sorted(benchledger.__all__) == sorted([*exports, "__version__"])
    assert len(benchledger.__all__) == len(set(benchledger.__all__))


def test_importing_the_cli_loads_no_database_rich_or_domain_code() -> None:
    """A Ctrl-C can only be handled once ``main()`` runs: everything else loads after it."""
    code = (
        "import sys, json, benchledger.cli; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'sqlalchemy', 'alembic', 'rich', 'attrs'})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(result.stdout) == []
    loaded = loaded_after("import benchledger.cli")
    assert loaded == {
        "benchledger",
        "benchledger.cli",
        "benchledger.cli.app",
        "benchledger.cli.group",
        "benchledger.cli.output",
        "benchledger.cli.settings",
    }
