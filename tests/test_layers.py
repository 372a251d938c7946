"""The import direction of the package, as a test, read from the map.

docs/architecture.md holds the layering: a table of layers, top to bottom, each
naming its top-level modules and packages. This test reads that table (it keeps no
list of its own) and checks the code against it: every module is placed, no module
imports a layer above its own, and there is no cycle. Lazy imports inside functions
count: they are dependencies all the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "evalpipe"
MAP = REPO / "docs" / "architecture.md"


def layers() -> list[tuple[str, list[str]]]:
    """(layer, module names) of each row of the Layers table, top layer first."""
    text = MAP.read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        names = re.findall(r"`([^`]+)`", cells[1])
        rows.append((cells[0], ["evalpipe" if n == "evalpipe" else
                                "evalpipe." + n.rstrip("/").replace("/", ".") for n in names]))
    return rows


def layer_of(module: str, rows: list[tuple[str, list[str]]]) -> int | None:
    """The index of the row whose most specific name holds `module` (0 = top)."""
    holding = [(len(name), index) for index, (_, names) in enumerate(rows) for name in names
               if module == name or (name != "evalpipe" and module.startswith(name + "."))]
    return max(holding)[1] if holding else None


def unplaced(modules, rows) -> list[str]:
    return sorted(m for m in modules if layer_of(m, rows) is None)


def upward(graph: dict[str, set[str]], rows) -> list[str]:
    """Imports into a layer above the importer's, as 'a (layer) -> b (layer)'."""
    return sorted(f"{a} ({rows[layer_of(a, rows)][0]}) -> {b} ({rows[layer_of(b, rows)][0]})"
                  for a, targets in graph.items() for b in targets
                  if layer_of(b, rows) < layer_of(a, rows))


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
                # `from evalpipe import jsonl` names the package, but imports jsonl
                if target and target != name and not _within(name, target):
                    targets.add(target)
        graph[name] = targets
    return graph


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_is_read():
    graph = package_imports()
    assert "evalpipe.engine" in graph["evalpipe.runner"]
    assert "evalpipe.cli.run" in graph["evalpipe.cli"]


def test_the_map_is_read():
    rows = layers()
    assert [layer for layer, _ in rows][:2] == ["command line", "public API"]
    assert rows[-1][0] == "foundations" and "evalpipe.errors" in rows[-1][1]


def test_every_module_is_placed_once():
    rows = layers()
    named = [n for _, names in rows for n in names]
    assert sorted(n for n in set(named) if named.count(n) > 1) == []
    modules = set(package_imports())
    assert unplaced(modules, rows) == []
    assert sorted(n for n in named if n not in modules) == []  # the map names no ghost


def test_no_module_imports_a_layer_above_its_own():
    assert upward(package_imports(), layers()) == []


def test_the_checks_fail_on_an_unplaced_module_and_an_upward_import():
    rows = layers()
    assert unplaced({"evalpipe.newcomer", "evalpipe.scoring.new"}, rows) == ["evalpipe.newcomer"]
    graph = {"evalpipe.scoring.stats": {"evalpipe._report.build", "evalpipe.records"},
             "evalpipe.backends.local.batching": {"evalpipe.backends.base"}}
    [found] = upward(graph, rows)
    assert found == ("evalpipe.scoring.stats (judgement and the run directory) -> "
                     "evalpipe._report.build (reports)")


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
