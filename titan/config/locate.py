"""Where a registry function writes each config field, so findings point at file:line:col.

A registry function is ordinary Python, but it is written in a few regular shapes::

    def llama3_8b():
        return Trainer.Config(training=TrainingConfig(steps=3), ...)

    def llama3_8b_long():
        config = llama3_8b()
        config.training.steps = 1000
        config.parallelism = ParallelismConfig(tensor_parallel_degree=2)
        return config

Reading the function's syntax tree (nothing is executed) maps dotted paths such as
``training.steps`` to the keyword or assignment that sets them. A path not written in the function
(a default, or inherited from another registry function) falls back to the nearest written parent,
and finally to the function's ``def`` line.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from titan.schemas.diagnostics import Span


def _span(file: str, node: ast.AST, indent: int) -> Span:
    end_col = node.end_col_offset
    return Span(
        file=file,
        line=node.lineno,
        col=node.col_offset + 1 + indent,
        end_line=node.end_lineno,
        end_col=end_col + 1 + indent
        if end_col is not None and node.end_lineno == node.lineno
        else None,
    )


class _Writes(ast.NodeVisitor):
    """Collects ``path -> node`` for keyword arguments and attribute assignments."""

    def __init__(self) -> None:
        self.paths: dict[str, ast.AST] = {}
        self.config_names: set[str] = set()

    def call(self, node: ast.Call, prefix: str) -> None:
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            path = f"{prefix}{keyword.arg}"
            self.paths.setdefault(path, keyword)
            self.value(keyword.value, f"{path}.")

    def value(self, node: ast.expr, prefix: str) -> None:
        if isinstance(node, ast.Call):
            self.call(node, prefix)
        elif isinstance(node, ast.List | ast.Tuple):
            for index, item in enumerate(node.elts):
                path = f"{prefix.rstrip('.')}[{index}]"
                self.paths.setdefault(path, item)
                self.value(item, f"{path}.")

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            if isinstance(node.value, ast.Name):
                self.config_names.add(node.value.id)
            else:
                self.value(node.value, "")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            chain = _attribute_chain(target)
            if chain is None:
                continue
            if len(chain) == 1:  # ``config = Trainer.Config(...)`` or ``config = other()``
                self.config_names.add(chain[0])
                self.value(node.value, "")
            else:
                path = ".".join(chain[1:])
                self.paths[path] = target
                self.value(node.value, f"{path}.")


def _attribute_chain(node: ast.expr) -> list[str] | None:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def locator(function: Callable[..., Any]) -> Callable[[str], Span | None]:
    """A function from dotted config path to the place ``function`` writes it (best effort)."""
    try:
        file = inspect.getsourcefile(function)
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return lambda path: None
    if file is None:
        return lambda path: None
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    return node_locator(tree.body[0], file=file, indent=indent, first=first)


def node_locator(
    definition: ast.AST, *, file: str, indent: int = 0, first: int | None = None
) -> Callable[[str], Span | None]:
    """:func:`locator` for a ``def`` already parsed (from its whole module: ``indent`` 0)."""
    writes = _Writes()
    for statement in getattr(definition, "body", []):
        writes.visit(statement)
    if first is None:
        decorators = getattr(definition, "decorator_list", [])
        first = decorators[0].lineno if decorators else definition.lineno
    def_span = Span(file=file, line=first, col=1)

    def locate(path: str) -> Span | None:
        probe = path
        while probe:
            node = writes.paths.get(probe)
            if node is not None:
                return _span(file, node, indent)
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""
        return def_span

    locate.written = lambda path: path in writes.paths  # type: ignore[attr-defined]
    return locate
