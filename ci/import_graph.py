"""The package's import figures: modules, largest module, import floors, circles, imports that run back up.

    python ci/import_graph.py [PACKAGE_DIR] [--json] [--check]

Read from the source with ``ast`` (nothing is imported), so it measures any checkout, old or new:
- *floor*: a module that imports nothing of the package at import time is on floor 1; any other is one above
  the highest module it imports at import time (imports under ``if TYPE_CHECKING:`` are not run and not counted);
- *circle*: a group of modules that reach each other through imports, counting imports inside functions too;
- *back up*: an import, inside a function or at the top, of a module of the same wing (or, for the
  package's top-level modules, of any top-level module) on the same floor or a higher one; between wings the
  wing order below decides;
- *wing order*: with ``--check``, a subpackage may import only itself and the wings listed before it in
  ``WINGS`` below (the top-level modules in ``GROUND`` are the ground floor, everything else at the
  top of the package may import any wing). ``--check`` exits 1 on a circle, an import that runs back up, a
  wing importing a later wing, or a module over ``MAX_LINES`` lines.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: The wings from the bottom up; a wing may import the wings before it, never after.
WINGS = ("core", "storage", "codecs", "metadata", "read", "gpu", "advise", "write", "backend", "testing")
GROUND = ("config", "errors", "tuning", "xarray_compat")
MAX_LINES = 600


@dataclass
class Module:
    name: str
    lines: int
    eager: set[str] = field(default_factory=set)  # imported when the module is imported
    lazy: set[str] = field(default_factory=set)  # imported inside a function


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([root.name, *parts])


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = current.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # `from pkg import mod` names a module when pkg/mod.py exists: both are candidates, filtered by the caller
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _collect(tree: ast.Module, current: str, is_package: bool, known: set[str]) -> tuple[set[str], set[str]]:
    eager: set[str] = set()
    lazy: set[str] = set()

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base, *members = _resolve(current, is_package, node)
            modules = [m for m in members if m in known]
            # `from pkg import mod` imports the module (its package runs first, as for any submodule)
            names = modules if modules and len(modules) == len(members) else [base, *modules]
        else:
            return []
        found = []
        for name in names:
            # the module itself, or the package holding a name imported from it
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != current:
                found.append(name)
        return found

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    walk_node(sub, in_function)
                continue
            walk_node(child, in_function)

    def walk_node(child: ast.AST, in_function: bool) -> None:
        (lazy if in_function else eager).update(targets(child))
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        walk(child, inner)

    walk(tree, False)
    # a module's package __init__ runs first, but that is the package's doing, not an edge of the module's
    return eager, lazy - eager


def load(root: Path) -> dict[str, Module]:
    paths = sorted(root.rglob("*.py"))
    known = {_module_name(root, p) for p in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        name = _module_name(root, path)
        text = path.read_text()
        eager, lazy = _collect(ast.parse(text), name, path.name == "__init__.py", known)
        modules[name] = Module(name, text.count("\n"), eager, lazy)
    return modules


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _is_package_of(a: str, b: str) -> bool:
    return b.startswith(a + ".")


def floors(modules: dict[str, Module]) -> dict[str, int]:
    # a package's __init__ importing its own submodules is how re-exports work: not a floor above them
    graph = {m.name: {t for t in m.eager if not _is_package_of(t, m.name)} for m in modules.values()}
    groups = _strongly_connected(graph)
    group_of = {name: i for i, g in enumerate(groups) for name in g}
    floor_of_group: dict[int, int] = {}
    for i, group in enumerate(groups):  # Tarjan emits a group after every group it reaches
        below = [floor_of_group[group_of[t]] for name in group for t in graph[name] if group_of[t] != i]
        floor_of_group[i] = 1 + max(below, default=0)
    return {name: floor_of_group[group_of[name]] for name in modules}


def _wing(name: str) -> str:
    """The subpackage a module belongs to; "" for the package's own top-level modules."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else ""


def figures(root: Path) -> dict[str, object]:
    modules = load(root)
    floor = floors(modules)
    graph = {
        m.name: {t for t in m.eager | m.lazy if not _is_package_of(t, m.name) and not _is_package_of(m.name, t)}
        for m in modules.values()
    }
    circles = [g for g in _strongly_connected(graph) if len(g) > 1]
    back_up = sorted(
        f"{m.name} -> {t}"
        for m in modules.values()
        for t in m.eager | m.lazy
        if not _is_package_of(m.name, t) and not _is_package_of(t, m.name) and floor[t] >= floor[m.name]
        and _wing(t) == _wing(m.name)
    )
    wing_order = {w: i for i, w in enumerate(WINGS)}
    against_wings = []
    for m in modules.values():
        source = _wing(m.name)
        if source not in wing_order:
            continue
        for t in m.eager | m.lazy:
            target = _wing(t)
            if target == source or t.split(".")[-1] in GROUND and t.count(".") == 1:
                continue
            if target not in wing_order or wing_order[target] > wing_order[source]:
                against_wings.append(f"{m.name} -> {t}")
    largest = max(modules.values(), key=lambda m: m.lines)
    return {
        "modules": len(modules),
        "largest": {"module": largest.name, "lines": largest.lines},
        "over_max_lines": sorted(f"{m.name} ({m.lines})" for m in modules.values() if m.lines > MAX_LINES),
        "floors": max(floor.values()),
        "circles": circles,
        "back_up": back_up,
        "against_wings": sorted(against_wings),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default=str(Path(__file__).resolve().parents[1] / "xarray_zarrmax"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the layering rules hold")
    args = parser.parse_args(argv)
    result = figures(Path(args.package).resolve())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"modules: {result['modules']}")
        largest = result["largest"]
        assert isinstance(largest, dict)
        print(f"largest module: {largest['module']} ({largest['lines']} lines)")
        print(f"modules over {MAX_LINES} lines: {len(result['over_max_lines'])}")  # type: ignore[arg-type]
        print(f"import floors: {result['floors']}")
        for key in ("circles", "back_up", "against_wings"):
            items = result[key]
            assert isinstance(items, list)
            print(f"{key.replace('_', ' ')}: {len(items)}")
            for item in items:
                print(f"  {' <-> '.join(item) if isinstance(item, list) else item}")
    if args.check:
        broken = result["circles"] or result["back_up"] or result["against_wings"] or result["over_max_lines"]
        return 1 if broken else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
