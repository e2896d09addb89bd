"""docs/errors.md documents exactly the error codes the package can raise or report."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import benchledger
from benchledger.errors import STUDY_STATUSES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
PACKAGE = Path(benchledger.__file__).resolve().parent
NAMESPACED = re.compile(r"^(benchmark\.campaign|ledger)\.[a-z0-9_.-]+$")
ROOTS = {"benchmark.campaign.", "ledger."}
#: Test support is not the library: its doubles raise codes of their own making.
EXCLUDED = ("testing", "_migrations")


def _included(parts: tuple[str, ...]) -> bool:
    return not any(part in EXCLUDED for part in parts)


def literal_codes() -> set[str]:
    """Every namespaced string literal in the package's source."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if not _included(path.relative_to(PACKAGE).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and NAMESPACED.fullmatch(node.value)
            ):
                found.add(node.value)
    return found


def constant_codes() -> set[str]:
    """Every namespaced string a module defines (codes built as ``PREFIX + "name"``)."""
    found: set[str] = set()
    for info in pkgutil.walk_packages(benchledger.__path__, "benchledger."):
        if not _included(tuple(info.name.split("."))):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, str) and NAMESPACED.fullmatch(value):
                found.add(value)
    return found


def code_set() -> set[str]:
    codes = (literal_codes() | constant_codes()) - ROOTS
    # A prefix (``benchmark.campaign.dependency.``) stands for a family: ``prefix<code>``.
    families = {code + "<code>" for code in codes if code.endswith(".")}
    return {code for code in codes if not code.endswith(".")} | families | set(STUDY_STATUSES)


def documented_codes() -> list[str]:
    """The first cell of every table row in docs/errors.md, when it is a `code`."""
    rows = re.findall(r"^\| `([^`]+)` \|", DOCS.read_text(encoding="utf-8"), re.MULTILINE)
    return rows


def test_the_collector_sees_codes_of_every_kind() -> None:
    codes = code_set()
    assert {
        "benchmark.campaign.lease_lost",  # built as C + "lease_lost" in the domain
        "benchmark.campaign.schema_unsupported",  # a literal in legacy adoption
        "benchmark.campaign.dependency.<code>",  # a family
        "ledger.schema.behind",
        "ledger.input.file_missing",  # the command line's own
        "not_found",  # a study category
    } <= codes


def test_every_code_is_documented_exactly_once_and_nothing_else() -> None:
    documented = documented_codes()
    duplicates = sorted({code for code in documented if documented.count(code) > 1})
    assert not duplicates, f"documented twice: {duplicates}"
    codes = code_set()
    missing = sorted(codes - set(documented))
    unknown = sorted(set(documented) - codes)
    assert not missing, f"codes missing from docs/errors.md: {missing}"
    assert not unknown, f"docs/errors.md documents codes the package never uses: {unknown}"
