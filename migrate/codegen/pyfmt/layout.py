"""Expression layout: one line when it fits, else split brackets, as ``ruff format`` does.

Also the value of a statement (``x = value``, ``return value``, ``x: T = value``), which ruff may
wrap in parentheses; the rules are listed in the package docstring.
"""

from __future__ import annotations

from titan.migrate.codegen.pyfmt.nodes import (
    Arg,
    Call,
    DictExpr,
    DictItem,
    Lambda,
    ListExpr,
    Lit,
    Ref,
    TupleExpr,
    is_identifier,
)
from titan.migrate.codegen.pyfmt.text import (
    INDENT,
    LINE_WIDTH,
    NOTHING,
    Text,
    indent_text,
    number_text,
    own_line_comments,
    string_literal,
    trailing_comment,
)

# ----------------------------------------------------------------------------- flat forms


def literal_text(value: object) -> str:
    """The one-line source text of a literal, e.g. for ``Literal[...]`` annotations."""
    return _flat(Lit(value))


def _lit_node(lit: Lit) -> object:
    """The node a literal is printed as: containers and special floats become their own nodes,
    scalars stay a :class:`Lit`."""
    value = lit.value
    if isinstance(value, list):
        return ListExpr([Arg(Lit(item)) for item in value])
    if isinstance(value, tuple):
        return TupleExpr([Arg(Lit(item)) for item in value])
    if isinstance(value, dict):
        return DictExpr([DictItem(Lit(key), Lit(item)) for key, item in value.items()])
    if isinstance(value, float) and not (value - value == 0):  # inf, -inf, nan
        name = "nan" if value != value else ("inf" if value > 0 else "-inf")
        return Call(Ref("float"), [Arg(Lit(name))])
    return lit


def _scalar_text(value: object) -> str:
    """Source text of a scalar literal value."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return string_literal(value)
    return number_text(value)


def _flat(expr: object) -> str:
    """``expr`` on one line (comments left out: callers check :func:`_has_comments`)."""
    if isinstance(expr, Lit):
        node = _lit_node(expr)
        return _scalar_text(expr.value) if node is expr else _flat(node)
    if isinstance(expr, Ref):
        return expr.text
    if isinstance(expr, Lambda):
        return "lambda: " + _flat(expr.body)
    brackets = _brackets(expr)
    inside = ", ".join(_flat_entry(entry) for entry in brackets.entries)
    if brackets.always_comma:
        inside += ","
    return brackets.opener + inside + brackets.closer


def _flat_entry(entry: Arg | DictItem) -> str:
    """An argument or dict item on one line."""
    return _entry_prefix(entry) + _flat(entry.value)


def _entry_prefix(entry: Arg | DictItem) -> str:
    """What precedes an entry's value: ``name=``, ``key: `` or nothing."""
    if isinstance(entry, DictItem):
        return _flat(entry.key) + ": "
    return "" if entry.name is None else entry.name + "="


def _has_comments(expr: object) -> bool:
    """True when a comment is anywhere inside ``expr`` (it cannot be printed on one line)."""
    if isinstance(expr, Lambda):
        return _has_comments(expr.body)
    if not isinstance(expr, Call | ListExpr | TupleExpr | DictExpr):
        return False
    return any(_entry_has_comments(entry) for entry in _brackets(expr).entries)


def _entry_has_comments(entry: Arg | DictItem) -> bool:
    """True when the entry carries a comment or holds one."""
    return bool(entry.comments) or entry.trailing is not None or _has_comments(entry.value)


class _Brackets:
    """An expression seen as ``opener entries closer``, the shape every split works on.

    ``hug``: the entries may sit together on one indented line when the brackets split (call
    arguments; ruff never does it for list, tuple and dict literals). ``always_comma``: a
    one-element tuple, whose comma is syntax.
    """

    __slots__ = ("opener", "entries", "closer", "hug", "always_comma")

    def __init__(
        self,
        opener: str,
        entries: list,
        closer: str,
        hug: bool = False,
        always_comma: bool = False,
    ) -> None:
        self.opener = opener
        self.entries = entries
        self.closer = closer
        self.hug = hug
        self.always_comma = always_comma


def _brackets(expr: object) -> _Brackets | None:
    """The bracket view of a call or container, None for what cannot split."""
    if isinstance(expr, Lit):
        node = _lit_node(expr)
        return None if node is expr else _brackets(node)
    if isinstance(expr, Call):
        return _Brackets(expr.func.text + "(", expr.args, ")", hug=True)
    if isinstance(expr, ListExpr):
        return _Brackets("[", expr.items, "]")
    if isinstance(expr, DictExpr):
        return _Brackets("{", expr.items, "}")
    if isinstance(expr, TupleExpr):
        return _Brackets("(", expr.items, ")", always_comma=len(expr.items) == 1)
    return None


def _can_split(expr: object) -> bool:
    """True for brackets with something inside."""
    brackets = _brackets(expr)
    return brackets is not None and bool(brackets.entries)


# ----------------------------------------------------------------------------- expression layout


def expression_lines(expr: object, indent: int, head: Text, tail: Text) -> list[Text]:
    """The lines of ``expr`` written after ``head`` (the start of the current line, indentation
    included) and followed by ``tail`` (comma, closing bracket, comment) on its last line.

    One line when it fits and holds no comment (the flat check of a ruff group), else the
    brackets split (:func:`_split`). ``indent`` is the indentation of ``head``'s line.
    """
    if not _has_comments(expr):
        line = head + _flat(expr) + tail
        if line.fits():
            return [line]
    if isinstance(expr, Lambda):
        return _lambda_lines(expr.body, indent, head + "lambda: ", tail)
    if not _can_split(expr):
        return [head + _flat(expr) + tail]
    return _split(_brackets(expr), indent, head, tail)


def _split(brackets: _Brackets, indent: int, head: Text, tail: Text) -> list[Text]:
    """Split open brackets: the opener ends the first line, the closer (and ``tail``) starts
    the last one, the entries go in between, indented one level.

    Call arguments first try one shared line; otherwise each entry gets its own lines, leading
    comments above it, and a comma after it unless it is a single entry.
    """
    inner = indent + INDENT
    first = head + brackets.opener
    last = indent_text(indent) + brackets.closer + tail
    entries = brackets.entries
    if brackets.hug and not any(_entry_has_comments(entry) for entry in entries):
        together = indent_text(inner) + ", ".join(_flat_entry(entry) for entry in entries)
        if together.fits():
            return [first, together, last]
    lines = [first]
    needs_comma = len(entries) > 1 or brackets.always_comma
    for entry in entries:
        lines += [indent_text(inner) + comment for comment in own_line_comments(entry.comments)]
        entry_tail = Text("," if needs_comma else "") + trailing_comment(entry.trailing)
        entry_head = indent_text(inner) + _entry_prefix(entry)
        lines += expression_lines(entry.value, inner, entry_head, entry_tail)
    lines.append(last)
    return lines


def _lambda_lines(body: object, indent: int, head: Text, tail: Text) -> list[Text]:
    """A lambda whose body does not fit after ``head`` (which ends with ``lambda: ``).

    ruff splits a list, tuple or dict body in its brackets, and a call body in its parentheses
    when ``lambda: f(`` fits; any other body is wrapped in parentheses, fitting or not.
    """
    if _is_container(body):
        return expression_lines(body, indent, head, tail)
    if _is_call_with_arguments(body):
        split = _split(_brackets(body), indent, head, tail)
        if split[0].fits():
            return split
    return _parenthesized(body, indent, head, tail)


# ----------------------------------------------------------------------------- statement values


def _inlines_comment(expr: object) -> bool:
    """True for values after which ruff moves the statement's trailing comment inside added
    parentheses: names, strings, non-negative numbers, ``True``, ``False``, ``None``."""
    if isinstance(expr, Ref):
        return "." not in expr.text
    if isinstance(expr, Lit) and _lit_node(expr) is expr:
        return not _scalar_text(expr.value).startswith("-")
    return False


def _is_container(expr: object) -> bool:
    """Lists, tuples and dicts (empty ones too): ruff never parenthesizes them."""
    node = _lit_node(expr) if isinstance(expr, Lit) else expr
    return isinstance(node, ListExpr | TupleExpr | DictExpr)


def _opens_a_split(expr: object) -> bool:
    """Calls with arguments and lambdas: they split after an opening on their first line, and
    ruff parenthesizes them in statements only when that first line does not fit."""
    return _is_call_with_arguments(expr) or isinstance(expr, Lambda)


def _is_call_with_arguments(expr: object) -> bool:
    """True for ``f(...)`` with at least one argument (``f()`` cannot split)."""
    brackets = _brackets(expr)
    return brackets is not None and brackets.hug and bool(brackets.entries)


def _parenthesized(expr: object, indent: int, head: Text, tail: Text) -> list[Text]:
    """``head (`` / the expression laid out one level deeper / ``)`` + ``tail``."""
    inner = expression_lines(expr, indent + INDENT, indent_text(indent + INDENT), NOTHING)
    return [head + "(", *inner, indent_text(indent) + ")" + tail]


def value_lines(expr: object, indent: int, head: Text, comment: Text) -> list[Text]:
    """The lines of a statement ending in a value: ``x = value``, ``return value``.

    Reproduces ruff's layout for the last expression of a statement (see the module docstring):
    one line if it fits; containers split their brackets; calls split theirs unless the first
    line does not fit and the parenthesized layout does; what cannot split is parenthesized
    when that makes it fit.
    """
    if not _has_comments(expr):
        line = head + _flat(expr) + comment
        if line.fits():
            return [line]
    if _opens_a_split(expr):
        split = expression_lines(expr, indent, head, comment)
        if split[0].fits():
            return split
        if isinstance(expr, Lambda):
            raise _lambda_error(head)
        wrapped = _parenthesized(expr, indent, head, comment)
        return wrapped if all(line.fits() for line in wrapped) else split
    if _is_container(expr):
        return expression_lines(expr, indent, head, comment)
    return best_fit_lines(_flat(expr), _inlines_comment(expr), indent, head, comment)


def best_fit_lines(flat: str, inline: bool, indent: int, head: Text, comment: Text) -> list[Text]:
    """Something that cannot split after ``head``: parenthesized on its own line if ``head (``,
    that line and ``)`` all fit, else on one (long) line. ``inline``: the trailing comment goes
    inside the parentheses instead of after them."""
    line = head + flat + comment
    if line.fits():
        return [line]
    if inline:
        wrapped = [
            head + "(",
            indent_text(indent + INDENT) + flat + comment,
            indent_text(indent) + ")",
        ]
    else:
        wrapped = [
            head + "(",
            indent_text(indent + INDENT) + flat,
            indent_text(indent) + ")" + comment,
        ]
    return wrapped if all(line.fits() for line in wrapped) else [line]


def is_simple_annotation(annotation: str) -> bool:
    """True for an annotation ruff cannot split (a dotted name or ``None``): the value is then
    laid out exactly like an assignment's."""
    return annotation == "None" or all(is_identifier(part) for part in annotation.split("."))


def annotated_value_lines(expr: object, indent: int, head: Text, annotation: str) -> list[Text]:
    """The lines of ``x: T = value`` when ``T`` can split (``list[str]``, ``int | None``).

    ruff then prefers, in order: one line; a call split after its ``(`` if that line fits;
    the value parenthesized if ``x: T = (`` fits (whether the value fits or not); splitting
    ``T``, which this printer never does (``ValueError``). Containers split their brackets if
    ``x: T = [`` fits; a negative number is never parenthesized there.
    """
    if not _has_comments(expr):
        line = head + _flat(expr)
        if line.fits():
            return [line]
    if _is_container(expr):
        lines = expression_lines(expr, indent, head, NOTHING)
        if lines[0].fits():
            return lines
        raise annotation_error(annotation)
    if _opens_a_split(expr):
        split = expression_lines(expr, indent, head, NOTHING)
        if split[0].fits():
            return split
        if isinstance(expr, Lambda):
            raise _lambda_error(head)
    elif isinstance(expr, Lit) and not _inlines_comment(expr):
        raise annotation_error(annotation)
    if (head + "(").fits():
        return _parenthesized(expr, indent, head, NOTHING)
    raise annotation_error(annotation)


def _lambda_error(head: Text) -> ValueError:
    """The error for a lambda value whose first line does not fit (its layout is not reproduced)."""
    return ValueError(
        f"{head.text.strip()!r}: a lambda assigned or returned must start on a line that fits "
        f"in {LINE_WIDTH} columns (pyfmt does not reproduce ruff's layout beyond that); "
        "lambdas are meant as arguments, e.g. default_factory=lambda: [...]"
    )


def annotation_error(annotation: str) -> ValueError:
    """The error for an annotation that would have to split (pyfmt prints them verbatim)."""
    return ValueError(
        f"the annotation {annotation!r} would have to split to fit in {LINE_WIDTH} columns; "
        "pyfmt prints annotations verbatim: shorten the field name, annotation or value"
    )
