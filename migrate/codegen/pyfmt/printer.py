"""Statements and blocks printed as source: the module's entry point, :func:`format_module`.

Blank lines between statements follow ruff (see the package docstring); each statement's
value is laid out by ``layout``, docstrings by ``docstrings``, imports by ``imports``.
"""

from __future__ import annotations

from titan.migrate.codegen.pyfmt.docstrings import docstring_lines
from titan.migrate.codegen.pyfmt.imports import import_lines
from titan.migrate.codegen.pyfmt.layout import (
    annotated_value_lines,
    annotation_error,
    best_fit_lines,
    expression_lines,
    is_simple_annotation,
    value_lines,
)
from titan.migrate.codegen.pyfmt.nodes import (
    DEFINITIONS,
    IMPORTS,
    AnnAssign,
    Arg,
    Assign,
    Call,
    ClassDef,
    Comment,
    Docstring,
    For,
    FunctionDef,
    Import,
    ImportFrom,
    ImportGroup,
    Module,
    Ref,
    Return,
)
from titan.migrate.codegen.pyfmt.text import (
    INDENT,
    LINE_WIDTH,
    NOTHING,
    Text,
    own_line_comments,
    text_width,
    trailing_comment,
)

# ----------------------------------------------------------------------------- statements


def _statement_lines(stmt: object, indent: int) -> list[str]:
    """The lines of one statement (the leading comments of an assignment included)."""
    pad = " " * indent
    if isinstance(stmt, Docstring):
        return docstring_lines(stmt.text, indent)
    if isinstance(stmt, Comment):
        return [pad + line for line in own_line_comments((stmt.text,))]
    if isinstance(stmt, Import | ImportFrom):
        return import_lines(stmt, indent)
    if isinstance(stmt, ImportGroup):
        return [line for item in stmt.imports for line in import_lines(item, indent)]
    if isinstance(stmt, Assign | AnnAssign):
        comments = [pad + line for line in own_line_comments(stmt.comments)]
        if isinstance(stmt, AnnAssign):
            lines = _ann_assign_lines(stmt, indent)
        else:
            head = Text(f"{pad}{stmt.target} = ")
            lines = value_lines(stmt.value, indent, head, trailing_comment(stmt.trailing))
        return comments + [line.text for line in lines]
    if isinstance(stmt, For):
        comments = [pad + line for line in own_line_comments(stmt.comments)]
        header = f"{pad}for {stmt.target} in {stmt.iterable}:"
        if text_width(header) > LINE_WIDTH:
            raise ValueError(f"the line {header.strip()!r} is longer than {LINE_WIDTH} columns")
        return comments + [header] + _block_lines(stmt.body, indent + INDENT, "function")
    if isinstance(stmt, Return):
        if stmt.value is None:
            return [pad + "return"]
        lines = value_lines(stmt.value, indent, Text(pad + "return "), NOTHING)
        return [line.text for line in lines]
    if isinstance(stmt, FunctionDef | ClassDef):
        return _definition_lines(stmt, indent)
    raise TypeError(f"not a statement: {stmt!r}")


def _ann_assign_lines(stmt: AnnAssign, indent: int) -> list[Text]:
    """``x: T = value`` or ``x: T``; see :func:`annotated_value_lines`."""
    head = Text(f"{' ' * indent}{stmt.target}: ")
    simple = is_simple_annotation(stmt.annotation)
    if stmt.value is None:
        lines = best_fit_lines(stmt.annotation, False, indent, head, NOTHING)
        if simple or all(line.fits() for line in lines):
            return lines
        raise annotation_error(stmt.annotation)
    head += stmt.annotation + " = "
    if simple:
        return value_lines(stmt.value, indent, head, NOTHING)
    return annotated_value_lines(stmt.value, indent, head, stmt.annotation)


def _definition_lines(stmt: FunctionDef | ClassDef, indent: int) -> list[str]:
    """Decorators, the ``def``/``class`` line, and the indented body."""
    pad = " " * indent
    lines = []
    for decorator in stmt.decorators:
        lines += [
            line.text for line in expression_lines(decorator, indent, Text(pad + "@"), NOTHING)
        ]
    if isinstance(stmt, FunctionDef):
        returns = "" if stmt.returns is None else f" -> {stmt.returns}"
        header = f"{pad}def {stmt.name}(){returns}:"
        if text_width(header) > LINE_WIDTH:
            raise ValueError(f"the line {header.strip()!r} is longer than {LINE_WIDTH} columns")
        lines.append(header)
        kind = "function"
    else:
        if stmt.bases:
            bases = Call(Ref(stmt.name), [Arg(base) for base in stmt.bases])
            header = expression_lines(bases, indent, Text(pad + "class "), Text(":"))
            lines += [line.text for line in header]
        else:
            lines.append(f"{pad}class {stmt.name}:")
        kind = "class"
    body = _block_lines(stmt.body, indent + INDENT, kind)
    if all(isinstance(item, Comment) for item in stmt.body):
        body.append(pad + " " * INDENT + "pass")
    return lines + body


class _Unit:
    """A statement with the :class:`Comment` statements right before it (``stmt`` is None for
    comments that end a block)."""

    __slots__ = ("comments", "stmt")

    def __init__(self, comments: list[Comment], stmt: object) -> None:
        self.comments = comments
        self.stmt = stmt


def _units(stmts: list) -> list[_Unit]:
    """Group a block's statements into units (empty import groups are dropped)."""
    units = []
    comments: list[Comment] = []
    for stmt in stmts:
        if isinstance(stmt, ImportGroup) and not stmt.imports:
            continue
        if isinstance(stmt, Comment):
            comments.append(stmt)
        else:
            units.append(_Unit(comments, stmt))
            comments = []
    if comments:
        units.append(_Unit(comments, None))
    return units


def _blank_lines(previous: _Unit, unit: _Unit, kind: str, after_docstring: bool) -> int:
    """Empty lines between two units of a block, as ruff (and isort after imports) wants.

    ``kind`` is ``"module"``, ``"class"`` or ``"function"``; ``after_docstring`` says that
    ``previous`` is the block's docstring.
    """
    around_definition = 2 if kind == "module" else 1
    if isinstance(unit.stmt, DEFINITIONS) or isinstance(previous.stmt, DEFINITIONS):
        return around_definition
    if after_docstring:
        return 0 if kind == "function" else 1
    if isinstance(previous.stmt, IMPORTS):
        if isinstance(unit.stmt, IMPORTS) and not unit.comments:
            separate = isinstance(previous.stmt, ImportGroup) or isinstance(unit.stmt, ImportGroup)
            return 1 if separate else 0
        return 1 if kind == "module" else 0
    return 0


def _block_lines(stmts: list, indent: int, kind: str) -> list[str]:
    """The lines of a module, class or function body, blank lines included."""
    lines: list[str] = []
    units = _units(stmts)
    for position, unit in enumerate(units):
        if position:
            after_docstring = position == 1 and isinstance(units[0].stmt, Docstring)
            lines += [""] * _blank_lines(units[position - 1], unit, kind, after_docstring)
        for comment in unit.comments:
            lines += _statement_lines(comment, indent)
        if unit.stmt is not None:
            lines += _statement_lines(unit.stmt, indent)
    return lines


def format_module(module: Module) -> str:
    """The source text of ``module``, ending with exactly one newline (empty for no body)."""
    if not isinstance(module, Module):
        module = Module(module)
    lines = _block_lines(module.body, 0, "module")
    return "\n".join(lines) + "\n" if lines else ""
