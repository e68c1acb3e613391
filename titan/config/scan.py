"""Which functions of a registry module are registry functions, read from its syntax tree.

Nothing is imported or run here. A module-level function is a registry function when it is public
(no leading underscore) and either

- its return annotation names a trainer config (``-> Trainer.Config``,
  ``-> "FaultTolerantTrainer.Config"``), or
- it has no return annotation and returns ``...Trainer.Config(...)``, the result of another
  registry function, or a name bound to one of those.

A function annotated with something else (``-> dict``, ``-> MyConfig``) is listed as a *maybe*:
whoever imports the module evaluates the annotation and keeps it only when it is a
``Trainer.Config`` subclass. The scan also finds what makes a registry unusable before anything
runs: a name defined twice (only the later definition is registered), a function that needs
arguments, an ``async def``, and the ``TODO(titan-migrate)`` notes titan-migrate leaves where a
value could not be carried.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize

_TRAINER_CONFIG = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]*Trainer\.Config")
"""``Trainer.Config``, ``FaultTolerantTrainer.Config``, ``titan.trainer.Trainer.Config``."""

TODO_MARK = "TODO(titan-migrate):"
"""How titan-migrate marks a value it could not carry (``titan.migrate.codegen.render_code.TODO``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Declared:
    """A module-level ``def`` that is (or may be) a registry function."""

    name: str
    line: int
    """Line of the ``def`` keyword (after decorators)."""
    col: int
    """1-based column of the function's name on that line."""
    needs: tuple[str, ...]
    """Parameters without a default (a registry function is called with no arguments)."""
    is_async: bool
    certain: bool
    """The annotation or the returned value says ``Trainer.Config``; else it is a maybe."""


@dataclasses.dataclass(frozen=True, slots=True)
class Duplicate:
    """A registry function name defined twice at module level."""

    name: str
    first_line: int
    line: int
    col: int


@dataclasses.dataclass(frozen=True, slots=True)
class Todo:
    """A ``# TODO(titan-migrate): ...`` comment."""

    line: int
    col: int
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Scan:
    """What a registry module's source declares."""

    functions: tuple[Declared, ...]
    """Registry functions and maybes, in source order, the last definition of each name."""
    nodes: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    """The syntax tree of each function in ``functions``, by name."""
    duplicates: tuple[Duplicate, ...]
    todos: tuple[Todo, ...]

    def names(self) -> list[str]:
        return [f.name for f in self.functions if f.certain]


def scan(tree: ast.Module, text: str) -> Scan:
    """The registry functions ``tree`` (parsed from ``text``) declares."""
    defs = list(_module_defs(tree.body))
    lines = text.splitlines()
    by_name: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    duplicates = []
    for node in defs:
        earlier = by_name.get(node.name)
        if earlier is not None and not node.name.startswith("_"):
            line, col = _name_position(node, lines)
            duplicates.append(Duplicate(node.name, earlier.lineno, line, col))
        by_name[node.name] = node
    public = {name: node for name, node in by_name.items() if not name.startswith("_")}
    configs = _config_classes(tree.body)
    certain = {name for name, node in public.items() if _annotated_trainer(node, configs)}
    unannotated = {name: node for name, node in public.items() if node.returns is None}
    changed = True
    while changed:  # a function returning another registry function's config is one too
        changed = False
        for name, node in unannotated.items():
            if name not in certain and _returns_config(node, certain | configs):
                certain.add(name)
                changed = True
    functions = []
    for node in sorted(public.values(), key=lambda n: n.lineno):
        is_certain = node.name in certain
        if not is_certain and node.returns is None:
            continue  # a helper: it says nothing of returning a config
        line, col = _name_position(node, lines)
        functions.append(
            Declared(
                name=node.name,
                line=line,
                col=col,
                needs=_required(node.args),
                is_async=isinstance(node, ast.AsyncFunctionDef),
                certain=is_certain,
            )
        )
    nodes = {f.name: public[f.name] for f in functions}
    return Scan(tuple(functions), nodes, tuple(duplicates), tuple(_todos(text)))


def _module_defs(body: list[ast.stmt]):
    """Function definitions at module level, also under a module-level ``if`` or ``try``."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        elif isinstance(node, ast.If):
            yield from _module_defs(node.body)
            yield from _module_defs(node.orelse)
        elif isinstance(node, ast.Try | ast.TryStar):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _module_defs(part)


def _config_classes(body: list[ast.stmt]) -> set[str]:
    """Module-level classes that subclass a trainer config (``class MyConfig(Trainer.Config)``),
    directly or through another such class."""
    classes = [node for node in body if isinstance(node, ast.ClassDef)]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in classes:
            if node.name in found:
                continue
            bases = [ast.unparse(base) for base in node.bases]
            if any(_TRAINER_CONFIG.fullmatch(b) or b in found for b in bases):
                found.add(node.name)
                changed = True
    return found


def _annotated_trainer(
    node: ast.FunctionDef | ast.AsyncFunctionDef, configs: set[str] = frozenset()
) -> bool:
    annotation = node.returns
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        text = annotation.value.strip()
    elif annotation is not None:
        text = ast.unparse(annotation)
    else:
        return False
    return _TRAINER_CONFIG.fullmatch(text) is not None or text in configs


def _returns_config(node: ast.FunctionDef | ast.AsyncFunctionDef, known: set[str]) -> bool:
    """Whether a ``return`` in the function's own body gives a trainer config."""
    bound: set[str] = set()
    returns: list[ast.expr] = []
    for child in _own_nodes(node):
        if isinstance(child, ast.Assign) and _makes_config(child.value, known, bound):
            bound.update(t.id for t in child.targets if isinstance(t, ast.Name))
        elif isinstance(child, ast.Return) and child.value is not None:
            returns.append(child.value)
    return any(_makes_config(value, known, bound) for value in returns)


def _makes_config(value: ast.expr, known: set[str], bound: set[str]) -> bool:
    if isinstance(value, ast.Name):
        return value.id in bound
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Name):
        return func.id in known
    return _TRAINER_CONFIG.fullmatch(ast.unparse(func)) is not None


def _own_nodes(node: ast.AST):
    """The nodes of a function body in source order, not entering nested functions or classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield child
        yield from _own_nodes(child)


def _required(args: ast.arguments) -> tuple[str, ...]:
    positional = [*args.posonlyargs, *args.args]
    with_default = len(args.defaults)
    needed = [a.arg for a in positional[: len(positional) - with_default]]
    needed += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return tuple(needed)


def _name_position(
    node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]
) -> tuple[int, int]:
    """Line and 1-based column of the function's name (``def name``) in the module's lines."""
    line = node.lineno
    source = lines[line - 1] if 0 < line <= len(lines) else ""
    match = re.search(rf"\bdef\s+({re.escape(node.name)})\b", source)
    return line, (match.start(1) + 1 if match else node.col_offset + 1)


def todos(text: str) -> list[Todo]:
    """Every ``TODO(titan-migrate)`` comment of ``text`` (a module or one function's source)."""
    return list(_todos(text))


def _todos(text: str):
    """Every ``TODO(titan-migrate)`` comment, with its text after the mark."""
    if TODO_MARK not in text:
        return
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and TODO_MARK in token.string:
                at = token.string.index(TODO_MARK)
                note = token.string[at + len(TODO_MARK) :].strip()
                yield Todo(token.start[0], token.start[1] + at + 1, note)
    except (tokenize.TokenError, SyntaxError):
        return
