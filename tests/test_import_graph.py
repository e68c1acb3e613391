"""No two modules import each other, directly or around a loop, in schemas, migrate or titan.

The graph is read from the source (every ``import`` statement, including those inside functions:
a deferred import still ties two modules together), so the test needs neither torch nor an import
of the packages. Layers point one way: ``titan.schemas`` imports neither ``titan.migrate`` nor
the rest of ``titan``, and ``titan.migrate`` imports the rest of ``titan`` only inside the functions
that build titan objects. (``titan.schemas`` and ``titan.migrate`` are the top-level ``schemas/``
and ``migrate/`` folders: pyproject's package-dir.)
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# import name -> folder
PACKAGES = {"titan.schemas": "schemas", "titan.migrate": "migrate", "titan": "titan"}


@functools.cache
def modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the three packages."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _owner(name: str) -> str | None:
    """The module of ours that ``name`` (a module or a name inside one) resolves to."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path) -> set[str]:
    """The modules of ours that ``module`` imports anywhere in its source."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets |= {_owner(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # `from a import b` imports the module a.b when there is one, else a name of a.
            targets |= {_owner(f"{origin}.{alias.name}") for alias in node.names}
    return {t for t in targets if t is not None and t != module}


@functools.cache
def graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(_imported(module, path)) for module, path in modules().items()}


def cycles(edges: dict[str, frozenset[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _in(package: str, module: str) -> bool:
    """``module`` is ``package`` or inside it; ``"titan"`` means titan less its two folders."""
    if package == "titan" and (_in("titan.schemas", module) or _in("titan.migrate", module)):
        return False
    return module == package or module.startswith(f"{package}.")


def test_the_graph_finds_a_cycle_and_its_members():
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert cycles(edges) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": frozenset({"b"}), "b": frozenset()}) == []


def test_the_graph_sees_deferred_and_relative_imports():
    edges = graph()
    # the plan's comment step imports the comment reader inside a function; every package is read.
    assert "titan.migrate.tomledit.comments" in edges["titan.migrate.plan.comments"]
    assert any(_in("titan", m) for m in edges) and any(_in("titan.schemas", m) for m in edges)


@pytest.mark.parametrize("package", ["titan.schemas", "titan.migrate"])
def test_no_cycles(package):
    found = [sorted(c) for c in cycles(graph()) if any(_in(package, m) for m in c)]
    assert found == [], f"import cycles in {package}: {found}"


def test_no_cycles_anywhere():
    found = [sorted(c) for c in cycles(graph())]
    assert found == [], f"import cycles: {found}"


def test_layers_point_one_way():
    edges = graph()
    upward = [
        (module, target)
        for module, targets in edges.items()
        if _in("titan.schemas", module)
        for target in targets
        if _in("titan.migrate", target) or _in("titan", target)
    ]
    assert upward == [], "schemas must not import migrate or titan"
    for module, path in modules().items():
        if not _in("titan.migrate", module):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = [a.name for n in top_level if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in top_level if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if _in("titan", n)], f"{module} imports titan at import time"


def test_no_runtime_module_imports_a_spec_generator():
    """``titan.migrate.specgen`` writes the spec tables; the runtime reads only the tables it wrote."""
    found = [
        (module, target)
        for module, targets in graph().items()
        if not _in("titan.migrate.specgen", module)
        for target in targets
        if _in("titan.migrate.specgen", target)
    ]
    assert found == [], f"runtime modules import a generator: {found}"
