"""The syntax tree pyfmt prints: expression and statement nodes, checked where they are made.

Every node compares by type and fields. Text a node will print is validated on construction
(names must be dotted identifiers, literals plain data), so a tree that exists can be printed.
"""

from __future__ import annotations

import keyword

# ----------------------------------------------------------------------------- node base


class _Node:
    """Base of all nodes: equality by type and fields, a readable ``repr``."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


def _dotted_name(text: object, what: str) -> str:
    """``text`` if it is a dotted name (``a``, ``a.b.c``) of identifiers, else ``ValueError``."""
    if not isinstance(text, str) or not all(is_identifier(part) for part in text.split(".")):
        raise ValueError(f"{what} must be a dotted name of identifiers, got {text!r}")
    return text


def is_identifier(text: str) -> bool:
    """True for a name that can be written bare in code (not a keyword like ``class``)."""
    return text.isidentifier() and not keyword.iskeyword(text)


def _source_text(text: object, what: str) -> str:
    """``text`` if it is non-empty printable one-line source text (annotations are printed
    verbatim, so a line break or control character must not get in), else ``ValueError``."""
    if not isinstance(text, str) or not text.strip() or not text.isprintable():
        raise ValueError(f"{what} must be printable one-line source text, got {text!r}")
    return text


def _comment_lines(comments: object) -> tuple[str, ...]:
    """Leading comment texts as a tuple; a single string is one comment."""
    if comments is None:
        return ()
    if isinstance(comments, str):
        return (comments,)
    return tuple(str(text) for text in comments)


# ----------------------------------------------------------------------------- expressions


class Lit(_Node):
    """A literal built from a value: ``str``, ``int``, ``float``, ``bool``, ``None``, and
    ``list``, ``tuple`` or ``dict`` of those (dict keys: scalars).

    Strings use double quotes unless the string holds more ``"`` than ``'`` (ruff's rule), and
    escape backslashes, the quote, ``\\n``, ``\\r``, ``\\t`` and every non-printable character;
    printable Unicode stays literal. Floats print as ``repr`` without the ``+`` of the exponent
    (``1e16``); ``inf``, ``-inf`` and ``nan`` become ``float("inf")``, ``float("-inf")`` and
    ``float("nan")``. Lists, tuples and dicts are laid out like :class:`ListExpr` and friends.
    """

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        _check_literal(value)
        self.value = value


def _check_literal(value: object) -> None:
    """Raise ``TypeError`` unless ``value`` can be written as a literal."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_literal(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not (key is None or isinstance(key, bool | int | float | str)):
                raise TypeError(f"dict keys must be scalars, got {key!r}")
            _check_literal(item)
        return
    raise TypeError(f"cannot write a {type(value).__name__} as a literal: {value!r}")


class Ref(_Node):
    """A dotted name printed as is: ``model_registry``, ``Trainer.Config``, ``config.x.y``."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = _dotted_name(text, "a Ref")


class Arg(_Node):
    """A positional (``name`` None) or keyword argument, or a list/tuple item.

    ``comments`` are comment texts (without the ``#``) printed on their own lines above the
    argument; ``trailing`` is a comment printed after the argument's comma. Any comment makes the
    enclosing brackets split one argument per line.
    """

    __slots__ = ("value", "name", "comments", "trailing")

    def __init__(
        self,
        value: object,
        name: str | None = None,
        comments: object = (),
        trailing: str | None = None,
    ) -> None:
        if name is not None and not (isinstance(name, str) and is_identifier(name)):
            raise ValueError(f"argument names must be identifiers, got {name!r}")
        self.value = _expr(value)
        self.name = name
        self.comments = _comment_lines(comments)
        self.trailing = None if trailing is None else str(trailing)


class DictItem(_Node):
    """One ``key: value`` entry of a :class:`DictExpr`, with comments like :class:`Arg`."""

    __slots__ = ("key", "value", "comments", "trailing")

    def __init__(
        self,
        key: object,
        value: object,
        comments: object = (),
        trailing: str | None = None,
    ) -> None:
        self.key = _expr(key)
        self.value = _expr(value)
        self.comments = _comment_lines(comments)
        self.trailing = None if trailing is None else str(trailing)


class Call(_Node):
    """``func(args)``: ``func`` a dotted name (``Ref`` or str), ``args`` a list of :class:`Arg`
    (other values are wrapped as positional arguments)."""

    __slots__ = ("func", "args")

    def __init__(self, func: Ref | str, args: object = ()) -> None:
        self.func = func if isinstance(func, Ref) else Ref(func)
        self.args = [_arg(item) for item in args]
        seen_keyword = False
        for arg in self.args:
            if arg.name is None and seen_keyword:
                raise ValueError("a positional argument cannot follow a keyword argument")
            seen_keyword = seen_keyword or arg.name is not None


class ListExpr(_Node):
    """``[items]``; items are :class:`Arg` without names (other values are wrapped)."""

    __slots__ = ("items",)

    def __init__(self, items: object = ()) -> None:
        self.items = [_item(item) for item in items]


class TupleExpr(_Node):
    """``(items)``, always parenthesized; a single item keeps its comma: ``(1,)``."""

    __slots__ = ("items",)

    def __init__(self, items: object = ()) -> None:
        self.items = [_item(item) for item in items]


class DictExpr(_Node):
    """``{key: value}``; items are :class:`DictItem` or ``(key, value)`` pairs."""

    __slots__ = ("items",)

    def __init__(self, items: object = ()) -> None:
        self.items = [item if isinstance(item, DictItem) else DictItem(*item) for item in items]


class Lambda(_Node):
    """``lambda: body`` (no parameters), e.g. a ``default_factory``; see :func:`_lambda_lines`
    for how a long one splits."""

    __slots__ = ("body",)

    def __init__(self, body: object) -> None:
        self.body = _expr(body)


_EXPRESSIONS = (Lit, Ref, Call, ListExpr, TupleExpr, DictExpr, Lambda)


def _expr(value: object) -> object:
    """An expression node as is; any other value as a :class:`Lit`."""
    return value if isinstance(value, _EXPRESSIONS) else Lit(value)


def _arg(value: object) -> Arg:
    """An :class:`Arg` as is; anything else as a positional argument."""
    return value if isinstance(value, Arg) else Arg(value)


def _item(value: object) -> Arg:
    """A list or tuple item: like :func:`_arg`, but names are not allowed."""
    item = _arg(value)
    if item.name is not None:
        raise ValueError(f"list and tuple items cannot have names, got {item.name!r}")
    return item


# ----------------------------------------------------------------------------- statements


class Docstring(_Node):
    """The docstring of a module, class or function (the first statement of its body).

    The text is normalized first (see :func:`normalize_docstring`); then backslashes, the ``"``
    that would start or end the text or complete a ``\"\"\"``, and non-printable characters are
    escaped. One line prints as ``\"\"\"text\"\"\"``; several lines are indented to the block
    and the closing quotes get their own line.
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = str(text)


class FieldDoc(Docstring):
    """An attribute docstring: the string right under a dataclass field, printed like
    :class:`Docstring`, directly below the field."""

    __slots__ = ()


class Comment(_Node):
    """A comment line ``# text`` at the block's indentation; a text with line breaks prints as
    several comment lines. Comments directly before a statement stay with it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = str(text)


class Import(_Node):
    """``import module`` or ``import module as name``."""

    __slots__ = ("module",)

    def __init__(self, module: str) -> None:
        name, _, alias = module.partition(" as ")
        _dotted_name(name, "an imported module")
        if alias:
            _dotted_name(alias, "an import alias")
            if "." in alias:
                raise ValueError(f"an import alias must be a name, got {alias!r}")
        self.module = module


class ImportFrom(_Node):
    """``from module import names``; a name may be ``"x as y"``, ``module`` may be relative
    (``".sub"``). Names print in the order given; see :func:`sort_imports`."""

    __slots__ = ("module", "names")

    def __init__(self, module: str, names: object) -> None:
        dotted = module.lstrip(".")
        if dotted:
            _dotted_name(dotted, "an imported module")
        elif not module:
            raise ValueError("an ImportFrom needs a module")
        self.module = module
        self.names = [str(name) for name in names]
        if not self.names:
            raise ValueError(f"from {module} import: no names")
        for name in self.names:
            member, _, alias = name.partition(" as ")
            if not is_identifier(member) or (alias and not is_identifier(alias)):
                raise ValueError(f"cannot import {name!r}")


class ImportGroup(_Node):
    """Imports printed together; consecutive groups are separated by one blank line."""

    __slots__ = ("imports",)

    def __init__(self, imports: object) -> None:
        self.imports = list(imports)
        for item in self.imports:
            if not isinstance(item, Import | ImportFrom):
                raise TypeError(f"an ImportGroup holds Import and ImportFrom, got {item!r}")


class Assign(_Node):
    """``target = value``; ``target`` is a dotted name (``config.training.steps``).

    ``comments`` print on their own lines above, ``trailing`` at the end of the statement.
    """

    __slots__ = ("target", "value", "comments", "trailing")

    def __init__(
        self,
        target: str,
        value: object,
        comments: object = (),
        trailing: str | None = None,
    ) -> None:
        self.target = _dotted_name(target, "an assignment target")
        self.value = _expr(value)
        self.comments = _comment_lines(comments)
        self.trailing = None if trailing is None else str(trailing)


class AnnAssign(_Node):
    """``target: annotation = value`` (or ``target: annotation`` when ``value`` is None), e.g. a
    dataclass field. ``annotation`` is source text in ruff's style, printed verbatim."""

    __slots__ = ("target", "annotation", "value", "comments")

    def __init__(
        self,
        target: str,
        annotation: str,
        value: object = None,
        comments: object = (),
    ) -> None:
        self.target = _dotted_name(target, "an annotated target")
        self.annotation = _source_text(annotation, "an annotation")
        self.value = None if value is None else _expr(value)
        self.comments = _comment_lines(comments)


class For(_Node):
    """``for target in iterable:`` over a body of statements; ``target`` is an identifier and
    ``iterable`` a dotted name (``model_spec.model.layers``)."""

    __slots__ = ("target", "iterable", "body", "comments")

    def __init__(self, target: str, iterable: str, body: object, comments: object = ()) -> None:
        if not is_identifier(target):
            raise ValueError(f"a loop variable must be an identifier, got {target!r}")
        self.target = target
        self.iterable = _dotted_name(iterable, "a loop's iterable")
        self.body = list(body)
        if not self.body:
            raise ValueError("a for loop needs a body")
        self.comments = _comment_lines(comments)


class Return(_Node):
    """``return value`` (a bare ``return`` when ``value`` is None)."""

    __slots__ = ("value",)

    def __init__(self, value: object = None) -> None:
        self.value = None if value is None else _expr(value)


class FunctionDef(_Node):
    """``def name() -> returns:`` with no parameters; ``returns`` is source text or None."""

    __slots__ = ("name", "returns", "body", "decorators")

    def __init__(
        self,
        name: str,
        returns: str | None = None,
        body: object = (),
        decorators: object = (),
    ) -> None:
        if not is_identifier(name):
            raise ValueError(f"a function name must be an identifier, got {name!r}")
        self.name = name
        self.returns = None if returns is None else _source_text(returns, "a return annotation")
        self.body = list(body)
        self.decorators = [_expr(item) for item in decorators]


class ClassDef(_Node):
    """``class name(bases):``; ``bases`` are dotted names, ``decorators`` expressions printed
    as ``@`` + expression (``@dataclass(kw_only=True, slots=True)``)."""

    __slots__ = ("name", "bases", "body", "decorators")

    def __init__(
        self,
        name: str,
        bases: object = (),
        body: object = (),
        decorators: object = (),
    ) -> None:
        if not is_identifier(name):
            raise ValueError(f"a class name must be an identifier, got {name!r}")
        self.name = name
        self.bases = [base if isinstance(base, Ref) else Ref(base) for base in bases]
        self.body = list(body)
        self.decorators = [_expr(item) for item in decorators]


class Module(_Node):
    """A whole file: an optional :class:`Docstring` first, then import groups
    (:class:`ImportGroup`, or a list of imports), then the other statements."""

    __slots__ = ("body",)

    def __init__(self, body: object = ()) -> None:
        self.body = [ImportGroup(item) if isinstance(item, list | tuple) else item for item in body]


DEFINITIONS = (FunctionDef, ClassDef)
IMPORTS = (Import, ImportFrom, ImportGroup)
