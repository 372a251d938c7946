"""The import direction of the package, as a test.

Data flows one way (config -> engine -> samples -> scoring -> report), and the
imports follow it: the command line sits on top and nothing imports it; pure
scoring and the format parsers never reach up into generation. Lazy imports
inside functions count: they are dependencies all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "evalpipe"

# (importer prefix, imported prefix): an import from the first into the second is upward.
FORBIDDEN = [
    ("evalpipe.scoring", "evalpipe.engine"), ("evalpipe.scoring", "evalpipe.runner"),
    ("evalpipe.scoring", "evalpipe.backends"), ("evalpipe.scoring", "evalpipe.report"),
    ("evalpipe.formats", "evalpipe.engine"), ("evalpipe.formats", "evalpipe.runner"),
    ("evalpipe.formats", "evalpipe.backends"), ("evalpipe.formats", "evalpipe.scoring"),
    ("evalpipe.tools", "evalpipe.engine"), ("evalpipe.tools", "evalpipe.backends"),
    ("evalpipe.retrieval", "evalpipe.engine"), ("evalpipe.retrieval", "evalpipe.runner"),
    ("evalpipe.backends", "evalpipe.engine"), ("evalpipe.backends", "evalpipe.runner"),
    ("evalpipe.backends", "evalpipe.report"), ("evalpipe.engine", "evalpipe.runner"),
    ("evalpipe.report", "evalpipe.runner"), ("evalpipe.report", "evalpipe.engine"),
    ("evalpipe.report", "evalpipe.view"), ("evalpipe.view", "evalpipe.runner"),
    ("evalpipe.view", "evalpipe.engine"), ("evalpipe.view", "evalpipe.backends"),
]
# Foundations: every other module may use them, so they use none of the rest.
FOUNDATIONS = {"evalpipe.errors", "evalpipe.paths", "evalpipe.identity"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports() -> dict[str, set[str]]:
    """module -> evalpipe modules it imports (at any depth of its code)."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                found = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in found:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_is_read():
    graph = package_imports()
    assert "evalpipe.engine" in graph["evalpipe.runner"]
    assert "evalpipe.cli.run" in graph["evalpipe.cli"]


def test_nothing_below_the_command_line_imports_it():
    bad = sorted(f"{a} -> {b}" for a, targets in package_imports().items() for b in targets
                 if _within(b, "evalpipe.cli") and not _within(a, "evalpipe.cli")
                 and a != "evalpipe.__main__")
    assert bad == []


@pytest.mark.parametrize("importer,imported", FORBIDDEN)
def test_no_upward_import(importer, imported):
    bad = sorted(f"{a} -> {b}" for a, targets in package_imports().items() for b in targets
                 if _within(a, importer) and _within(b, imported))
    assert bad == []


def test_foundations_import_no_other_module():
    graph = package_imports()
    bad = sorted(f"{a} -> {b}" for a in FOUNDATIONS if a in graph for b in graph[a]
                 if b not in FOUNDATIONS)
    assert bad == []


def test_no_import_cycles():
    """No two modules reach each other through imports (a package and its own
    submodules excepted: an __init__ re-exports what lies below it)."""
    graph = package_imports()

    def edges(a):
        return {b for b in graph.get(a, ()) if not _within(b, a) and not _within(a, b)}

    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(edges(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == []
