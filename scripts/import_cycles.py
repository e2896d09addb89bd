"""Find import circles in src/benchledger, TYPE_CHECKING imports included.

import-linter (``lint-imports``) checks the layers, but its graph leaves out no
import and settles nothing about circles between two modules of one layer; a
circle closed only by an ``if TYPE_CHECKING:`` import never fails at run time
and still says a file sits in the wrong place. This reads every ``import`` and
``from ... import`` in every module with ``ast`` (module level, inside
functions, and under ``TYPE_CHECKING`` alike), resolves relative imports, and
prints each strongly connected component of more than one module.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module and
to ``pkg`` (its ``__init__``) otherwise. The implicit import of a package's
``__init__`` when one of its submodules is imported is not an edge: every
re-exporting ``__init__`` would otherwise close a circle with its own modules.

    .venv/bin/python scripts/import_cycles.py           # circles, exit 1 if any
    .venv/bin/python scripts/import_cycles.py --layers  # also the package-to-package edges
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "benchledger"


def module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        names[".".join(parts)] = path
    return names


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[tuple[str, bool]]:
    """(imported module, only under TYPE_CHECKING) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[tuple[str, bool]] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE and (hit := resolve(alias.name)):
                    found.add((hit, typing_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] == PACKAGE:
                for alias in node.names:
                    candidate = f"{source}.{alias.name}"
                    hit = candidate if candidate in modules else resolve(source)
                    if hit:
                        found.add((hit, typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    found.discard((name, False))
    found.discard((name, True))
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def top_package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", action="store_true", help="print the package-to-package edges")
    args = parser.parse_args()
    modules = module_names(ROOT)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    typing_edges: set[tuple[str, str]] = set()
    for name, path in modules.items():
        for target, typing_only in imports_of(name, path, modules):
            graph[name].add(target)
            if typing_only:
                typing_edges.add((name, target))
    print(
        f"{len(modules)} modules, {sum(map(len, graph.values()))} edges "
        f"({len(typing_edges)} under TYPE_CHECKING)"
    )
    if args.layers:
        packages: dict[tuple[str, str], int] = defaultdict(int)
        for name, targets in graph.items():
            for target in targets:
                a, b = top_package(name), top_package(target)
                if a != b:
                    packages[a, b] += 1
        for (a, b), n in sorted(packages.items()):
            print(f"  {a} -> {b} ({n})")
    circles = strongly_connected(graph)
    for component in circles:
        members = set(component)
        print(f"circle of {len(component)} modules:")
        for name in component:
            for target in sorted(graph[name] & members):
                tag = " (TYPE_CHECKING)" if (name, target) in typing_edges else ""
                print(f"  {name} -> {target}{tag}")
    print(f"{len(circles)} circle(s)")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
