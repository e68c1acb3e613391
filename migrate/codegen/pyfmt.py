"""Print a small Python syntax tree as source text that ``ruff format`` leaves unchanged.

The migrator builds its output as a tree of the nodes below (calls, literals, assignments,
functions, dataclasses) and :func:`format_module` prints it. The printed text is already what
``ruff format`` (line length 100) produces, and its imports are sorted the way ruff's isort rule
(``I001``) wants, so the generated files pass ``ruff format --check`` and ``ruff check``. ruff is
never run: the layout rules are reproduced here. They were found by running ruff 0.17 on
candidate code; ``tests/test_pyfmt.py`` checks them against ruff on hundreds of random trees.

Literals are produced from values, never pasted: :class:`Lit` escapes every string, so a hostile
string comes back as exactly the same string when the code runs and executes nothing. Comment
texts are escaped too and can never end the comment early.

**Expressions** (``Lit``, ``Ref``, ``Call``, ``ListExpr``, ``TupleExpr``, ``DictExpr``,
``Lambda``). An expression is printed on one line when the whole line fits (indentation, what
comes before it, the expression, and what follows it up to the line end: a comma, a closing
bracket, a trailing comment) and no comment is inside it. Otherwise its brackets split:

- call arguments first try to sit together on one indented line between the brackets; when that
  does not fit either, or a comment is inside, there is one argument per line;
- list, tuple and dict literals always go to one item per line when they split;
- one item per line gets a trailing comma after the last item, except when there is a single
  item (ruff never adds a comma there; a one-element tuple keeps the comma it needs);
- each item is laid out by the same rules with what follows it (its comma and trailing
  comment) counted on its last line, so nested brackets split from the outside in;
- a trailing comment counts with its width plus two spaces, a pragma comment (``noqa``,
  ``type:``...) counts zero, exactly like ruff's reserved width for line-suffix comments;
- names, literals and empty brackets cannot split and simply run past the limit;
- a lambda body that does not fit splits in its own brackets when it is a list, tuple or dict,
  or a call whose ``lambda: f(`` line fits; any other body is wrapped in parentheses.

**Statements whose value does not fit** (``x = value``, ``return value``, ``x: T = value``).
ruff may wrap the value in parentheses:

- a call with arguments splits its own brackets when the first line (``x = Foo(``) fits;
  otherwise it is wrapped in parentheses if every line of the wrapped layout fits, else it is
  split without parentheses all the same (Black's "prefer splitting the right hand side");
- lists, tuples and dicts never get parentheses;
- a lambda value must start on a line that fits (``ValueError`` otherwise: ruff's layout there
  is not reproduced; lambdas are meant as ``default_factory=lambda: [...]`` arguments);
- anything that cannot split (a name, a literal, ``a.b``, ``Foo()``) gets parentheses when
  ``x = (``, the value line and ``)`` all fit, and stays on one long line otherwise. A trailing
  comment of the statement moves inside the parentheses after a name, string, number, bool or
  ``None`` (ruff "inlines" it there) and stays after ``)`` for everything else;
- an annotation that can split (``list[str]``, ``Literal[...]``, ``int | None``) makes ruff
  prefer parenthesizing the value whenever ``x: T = (`` fits. Annotations are printed verbatim
  and never split: a field whose annotation would have to split raises ``ValueError``.

**Blank lines**: one after the module docstring, one between import groups, two around
top-level functions and classes (and before the comments that lead them), one around nested
ones, one after a class docstring, none elsewhere (a field's attribute docstring follows the
field directly, and so does the next field).

**Imports**: ``from m import a, b`` stays on one line when it fits, else one name per line in
parentheses with a trailing comma. :func:`sort_imports` orders them like ruff's isort.
"""

from __future__ import annotations

import keyword
import sys
import unicodedata

LINE_WIDTH = 100
"""The line length of the project's ruff configuration."""

INDENT = 4
"""Spaces per indentation level."""

_PRAGMAS = ("isort", "type", "pyright", "pyrefly", "pylint", "flake8", "ruff", "ty")
"""Comment prefixes (before a ``:``) that ruff treats as pragmas: they reserve no width."""


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
    if not isinstance(text, str) or not all(_is_identifier(part) for part in text.split(".")):
        raise ValueError(f"{what} must be a dotted name of identifiers, got {text!r}")
    return text


def _is_identifier(text: str) -> bool:
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
        if name is not None and not (isinstance(name, str) and _is_identifier(name)):
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
            if not _is_identifier(member) or (alias and not _is_identifier(alias)):
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
        if not _is_identifier(name):
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
        if not _is_identifier(name):
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


_DEFINITIONS = (FunctionDef, ClassDef)
_IMPORTS = (Import, ImportFrom, ImportGroup)


# ----------------------------------------------------------------------------- text and width


def _char_width(char: str) -> int:
    """Columns ruff counts for one character (the ``unicode-width`` rules it uses): 0 for
    combining marks and format characters, 2 for wide East Asian characters and emoji."""
    if unicodedata.category(char) in ("Mn", "Me", "Cf") or "\u1160" <= char <= "\u11ff":
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _width(text: str) -> int:
    """Columns ruff counts for ``text`` (no line breaks)."""
    if text.isascii():
        return len(text)
    return sum(_char_width(char) for char in text)


class _Text:
    """A piece of one output line and the width ruff counts for it.

    The width differs from the text's only for pragma comments, which ruff does not count.
    """

    __slots__ = ("text", "width")

    def __init__(self, text: str, width: int | None = None) -> None:
        self.text = text
        self.width = _width(text) if width is None else width

    def __add__(self, other: _Text | str) -> _Text:
        if isinstance(other, str):
            other = _Text(other)
        return _Text(self.text + other.text, self.width + other.width)

    def fits(self) -> bool:
        """True when the line is at most :data:`LINE_WIDTH` columns wide."""
        return self.width <= LINE_WIDTH


_NOTHING = _Text("", 0)


def _pad(indent: int) -> _Text:
    """The indentation of a line."""
    return _Text(" " * indent, indent)


def _escape_code(char: str) -> str:
    """``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN`` for one character (lower-case hex, as ruff)."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


_STRING_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string_literal(value: str) -> str:
    """A one-line string literal for ``value``, the way ruff writes it.

    ruff prefers double quotes and switches to single quotes only when the string holds more
    double than single quotes; only the chosen quote is escaped.
    """
    quote = "'" if value.count('"') > value.count("'") else '"'
    parts = []
    for char in value:
        if char == quote:
            parts.append("\\" + char)
        elif char in _STRING_ESCAPES:
            parts.append(_STRING_ESCAPES[char])
        elif char.isprintable():
            parts.append(char)
        else:
            parts.append(_escape_code(char))
    return quote + "".join(parts) + quote


def _number_text(value: int | float) -> str:
    """``repr`` of a finite number, without the exponent's ``+`` (ruff drops it)."""
    if isinstance(value, float):
        return float.__repr__(value).replace("e+", "e")
    return int.__repr__(value)


def _printable(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\n``, ``\\t``, ``\\x00``...)."""
    parts = []
    for char in text:
        if char.isprintable():
            parts.append(char)
        else:
            parts.append(_STRING_ESCAPES.get(char) or _escape_code(char))
    return "".join(parts)


def _comment(text: str) -> str:
    """``# text`` for one comment line: non-printable characters escaped (so nothing can end
    the comment), trailing spaces dropped (ruff drops them), an empty text gives ``#``."""
    text = _printable(text).rstrip(" ")
    return f"# {text}" if text else "#"


def _own_line_comments(texts: tuple[str, ...]) -> list[str]:
    """Comment lines for leading comments; a text with line breaks gives several lines."""
    lines = []
    for text in texts:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines += [_comment(line) for line in text.split("\n")]
    return lines


def _is_pragma(comment: str) -> bool:
    """ruff's ``is_pragma_comment``: ``noqa`` (any case), ``nosec`` or ``tool:`` comments."""
    content = comment[1:].lstrip()
    head, colon, _ = content.partition(":")
    return (
        (content[:4].isascii() and content[:4].lower() == "noqa")
        or content.startswith("nosec")
        or (bool(colon) and head in _PRAGMAS)
    )


def _trailing_comment(text: str | None) -> _Text:
    """``  # text`` after code, with the width ruff reserves for it (0 for a pragma).

    Line breaks in the text are escaped like other non-printable characters: the comment must
    stay on its line.
    """
    if text is None:
        return _NOTHING
    comment = _comment(text)
    return _Text("  " + comment, 0 if _is_pragma(comment) else 2 + _width(comment))


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
        return _string_literal(value)
    return _number_text(value)


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


def _layout(expr: object, indent: int, head: _Text, tail: _Text) -> list[_Text]:
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


def _split(brackets: _Brackets, indent: int, head: _Text, tail: _Text) -> list[_Text]:
    """Split open brackets: the opener ends the first line, the closer (and ``tail``) starts
    the last one, the entries go in between, indented one level.

    Call arguments first try one shared line; otherwise each entry gets its own lines, leading
    comments above it, and a comma after it unless it is a single entry.
    """
    inner = indent + INDENT
    first = head + brackets.opener
    last = _pad(indent) + brackets.closer + tail
    entries = brackets.entries
    if brackets.hug and not any(_entry_has_comments(entry) for entry in entries):
        together = _pad(inner) + ", ".join(_flat_entry(entry) for entry in entries)
        if together.fits():
            return [first, together, last]
    lines = [first]
    needs_comma = len(entries) > 1 or brackets.always_comma
    for entry in entries:
        lines += [_pad(inner) + comment for comment in _own_line_comments(entry.comments)]
        entry_tail = _Text("," if needs_comma else "") + _trailing_comment(entry.trailing)
        entry_head = _pad(inner) + _entry_prefix(entry)
        lines += _layout(entry.value, inner, entry_head, entry_tail)
    lines.append(last)
    return lines


def _lambda_lines(body: object, indent: int, head: _Text, tail: _Text) -> list[_Text]:
    """A lambda whose body does not fit after ``head`` (which ends with ``lambda: ``).

    ruff splits a list, tuple or dict body in its brackets, and a call body in its parentheses
    when ``lambda: f(`` fits; any other body is wrapped in parentheses, fitting or not.
    """
    if _is_container(body):
        return _layout(body, indent, head, tail)
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


def _parenthesized(expr: object, indent: int, head: _Text, tail: _Text) -> list[_Text]:
    """``head (`` / the expression laid out one level deeper / ``)`` + ``tail``."""
    inner = _layout(expr, indent + INDENT, _pad(indent + INDENT), _NOTHING)
    return [head + "(", *inner, _pad(indent) + ")" + tail]


def _value_lines(expr: object, indent: int, head: _Text, comment: _Text) -> list[_Text]:
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
        split = _layout(expr, indent, head, comment)
        if split[0].fits():
            return split
        if isinstance(expr, Lambda):
            raise _lambda_error(head)
        wrapped = _parenthesized(expr, indent, head, comment)
        return wrapped if all(line.fits() for line in wrapped) else split
    if _is_container(expr):
        return _layout(expr, indent, head, comment)
    return _best_fit_lines(_flat(expr), _inlines_comment(expr), indent, head, comment)


def _best_fit_lines(
    flat: str, inline: bool, indent: int, head: _Text, comment: _Text
) -> list[_Text]:
    """Something that cannot split after ``head``: parenthesized on its own line if ``head (``,
    that line and ``)`` all fit, else on one (long) line. ``inline``: the trailing comment goes
    inside the parentheses instead of after them."""
    line = head + flat + comment
    if line.fits():
        return [line]
    if inline:
        wrapped = [head + "(", _pad(indent + INDENT) + flat + comment, _pad(indent) + ")"]
    else:
        wrapped = [head + "(", _pad(indent + INDENT) + flat, _pad(indent) + ")" + comment]
    return wrapped if all(line.fits() for line in wrapped) else [line]


def _is_simple_annotation(annotation: str) -> bool:
    """True for an annotation ruff cannot split (a dotted name or ``None``): the value is then
    laid out exactly like an assignment's."""
    return annotation == "None" or all(_is_identifier(part) for part in annotation.split("."))


def _annotated_value_lines(expr: object, indent: int, head: _Text, annotation: str) -> list[_Text]:
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
        lines = _layout(expr, indent, head, _NOTHING)
        if lines[0].fits():
            return lines
        raise _annotation_error(annotation)
    if _opens_a_split(expr):
        split = _layout(expr, indent, head, _NOTHING)
        if split[0].fits():
            return split
        if isinstance(expr, Lambda):
            raise _lambda_error(head)
    elif isinstance(expr, Lit) and not _inlines_comment(expr):
        raise _annotation_error(annotation)
    if (head + "(").fits():
        return _parenthesized(expr, indent, head, _NOTHING)
    raise _annotation_error(annotation)


def _lambda_error(head: _Text) -> ValueError:
    return ValueError(
        f"{head.text.strip()!r}: a lambda assigned or returned must start on a line that fits "
        f"in {LINE_WIDTH} columns (pyfmt does not reproduce ruff's layout beyond that); "
        "lambdas are meant as arguments, e.g. default_factory=lambda: [...]"
    )


def _annotation_error(annotation: str) -> ValueError:
    return ValueError(
        f"the annotation {annotation!r} would have to split to fit in {LINE_WIDTH} columns; "
        "pyfmt prints annotations verbatim: shorten the field name, annotation or value"
    )


# ----------------------------------------------------------------------------- docstrings


def normalize_docstring(text: str) -> str:
    """The docstring text :class:`Docstring` prints, i.e. ``ast.get_docstring`` of the output.

    ruff and ``inspect.cleandoc`` both rewrite docstrings, so the text is brought to the form
    neither changes: line breaks become ``\\n``, tabs are expanded, other whitespace characters
    (``\\xa0``, ``\\u3000``, ``\\x0c``...) become spaces, trailing spaces go, the first line loses
    its leading spaces, the other lines their common indentation, and leading and trailing blank
    lines are dropped. Repeated until nothing changes. Lone surrogates become U+FFFD: CPython
    encodes a class's docstring to UTF-8 when it creates the class, and would fail.
    """
    text = str(text).replace("\r\n", "\n").replace("\r", "\n").expandtabs()
    text = "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)
    text = "".join(" " if char.isspace() and char != "\n" else char for char in text)
    while True:
        cleaned = _clean_docstring_once(text)
        if cleaned == text:
            return cleaned
        text = cleaned


def _clean_docstring_once(text: str) -> str:
    """One pass of ``inspect.cleandoc``'s rules (plus trailing spaces) on space-only text."""
    lines = [line.rstrip(" ") for line in text.split("\n")]
    lines[0] = lines[0].lstrip(" ")
    margins = [len(line) - len(line.lstrip(" ")) for line in lines[1:] if line]
    margin = min(margins, default=0)
    lines[1:] = [line[margin:] for line in lines[1:]]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


def _escape_docstring(text: str) -> str:
    """Source text for a normalized docstring between triple quotes.

    A ``"`` is escaped when it starts or ends the text (it would touch the quotes) or when it
    would complete a run of three; backslashes and non-printable characters are escaped too.
    """
    parts = []
    run = 0
    for position, char in enumerate(text):
        if char == '"':
            if position in (0, len(text) - 1) or run == 2:
                parts.append('\\"')
                run = 0
            else:
                parts.append('"')
                run += 1
            continue
        run = 0
        if char == "\\":
            parts.append("\\\\")
        elif char == "\n" or char.isprintable():
            parts.append(char)
        else:
            parts.append(_escape_code(char))
    return "".join(parts)


def _docstring_lines(text: str, indent: int) -> list[str]:
    """The lines of a docstring statement at ``indent``."""
    pad = " " * indent
    lines = _escape_docstring(normalize_docstring(text)).split("\n")
    if len(lines) == 1:
        return [f'{pad}"""{lines[0] or " "}"""']
    middle = [pad + line if line else "" for line in lines[1:]]
    return [f'{pad}"""{lines[0]}', *middle, f'{pad}"""']


# ----------------------------------------------------------------------------- imports


def _import_lines(node: Import | ImportFrom, indent: int) -> list[str]:
    """``from m import a, b`` on one line if it fits, else one name per line (isort's style,
    which ``ruff format`` keeps)."""
    pad = " " * indent
    if isinstance(node, Import):
        return [f"{pad}import {node.module}"]
    line = f"{pad}from {node.module} import {', '.join(node.names)}"
    if _width(line) <= LINE_WIDTH:
        return [line]
    names = [f"{pad}{' ' * INDENT}{name}," for name in node.names]
    return [f"{pad}from {node.module} import (", *names, f"{pad})"]


class _Natural(str):
    """A string that sorts in natural order (``x2`` before ``x10``), like the ``natord`` crate
    ruff's isort uses."""

    __slots__ = ()

    def __lt__(self, other: str) -> bool:
        return _natural_compare(self, other) < 0

    def __gt__(self, other: str) -> bool:
        return _natural_compare(self, other) > 0


def _natural_compare(left: str, right: str) -> int:
    """``natord::compare``: digit runs compare as numbers (left-aligned if one starts with 0),
    other characters by code point. Returns -1, 0 or 1."""
    i = j = 0
    while i < len(left) and j < len(right):
        a, b = left[i], right[j]
        if a.isascii() and a.isdigit() and b.isascii() and b.isdigit():
            i_end, j_end = _digits_end(left, i), _digits_end(right, j)
            if a == "0" or b == "0":
                order = _compare_left_aligned(left[i:i_end], right[j:j_end])
            else:
                order = _compare_right_aligned(left[i:i_end], right[j:j_end])
            if order:
                return order
            i, j = i_end, j_end
        elif a != b:
            return -1 if a < b else 1
        else:
            i, j = i + 1, j + 1
    return (i < len(left)) - (j < len(right))


def _digits_end(text: str, start: int) -> int:
    """The end of the run of ASCII digits starting at ``start``."""
    end = start
    while end < len(text) and text[end].isascii() and text[end].isdigit():
        end += 1
    return end


def _compare_right_aligned(left: str, right: str) -> int:
    """Numbers without leading zeros: the longer run wins, then the first differing digit."""
    if len(left) != len(right):
        return -1 if len(left) < len(right) else 1
    return (left > right) - (left < right)


def _compare_left_aligned(left: str, right: str) -> int:
    """Numbers with a leading zero: the first differing digit wins, then the longer run."""
    for a, b in zip(left, right, strict=False):
        if a != b:
            return -1 if a < b else 1
    return (len(left) > len(right)) - (len(left) < len(right))


def _member_key(name: str, alias: str | None) -> tuple:
    """ruff's ``MemberKey`` with ``order-by-type``: CONSTANTS, then Classes, then the rest,
    each case-insensitively in natural order, ties broken by case and alias."""
    if len(name.encode()) > 1 and name.isupper():
        member_type = 0
    elif name[:1].isupper():
        member_type = 1
    else:
        member_type = 2
    alias_key = () if alias is None else (_Natural(alias),)
    return (member_type, _Natural(name.lower()), _Natural(name), alias_key)


def _module_key(module: str, alias: str | None, first_member: tuple | None) -> tuple:
    """ruff's ``ModuleKey``: relative imports from the furthest (``..``) to the closest (``.``),
    then the module case-insensitively in natural order, then the first member and alias."""
    name = module.lstrip(".")
    level = len(module) - len(name)
    name_key = (_Natural(name.lower()), _Natural(name)) if name else ()
    alias_key = () if alias is None else (_Natural(alias),)
    return (-level, name_key, first_member or (), alias_key)


def _section(module: str, first_party: frozenset[str]) -> int:
    """isort's section: 0 future, 1 standard library, 2 third party, 3 first party, 4 local."""
    if module.startswith("."):
        return 4
    top = module.split(".")[0]
    if top == "__future__":
        return 0
    if top in first_party:
        return 3
    return 1 if top in sys.stdlib_module_names else 2


def sort_imports(imports: object, first_party: object = ()) -> list[ImportGroup]:
    """Merge, split and order imports the way ruff's isort (``I001``) wants them.

    Sections (one :class:`ImportGroup` each, empty ones left out): ``__future__``, the standard
    library, third party, first party (top-level names in ``first_party``; ruff finds them as
    folders of the project, so pass what your target tree has), relative imports. In a section,
    ``import x`` lines come first, then ``from`` imports by module; names of one module are
    merged into one statement, except ``x as y`` names, which get their own statement
    (ruff's default ``combine-as-imports = false``). Duplicates are dropped.
    """
    first_party = frozenset(first_party)
    straight, members = _collect_imports(imports)
    sections: dict[int, list[tuple[int, tuple, Import | ImportFrom]]] = {}
    for module, alias in straight:
        key = _module_key(module, alias, None)
        text = module if alias is None else f"{module} as {alias}"
        sections.setdefault(_section(module, first_party), []).append((0, key, Import(text)))
    for module, names in members.items():
        for statement in _from_statements(module, names):
            key = _module_key(module, None, _member_key(*statement[0]))
            texts = [name if alias is None else f"{name} as {alias}" for name, alias in statement]
            entry = (1, key, ImportFrom(module, texts))
            sections.setdefault(_section(module, first_party), []).append(entry)
    return [
        ImportGroup([node for _, _, node in sorted(sections[section], key=lambda e: e[:2])])
        for section in sorted(sections)
    ]


def _collect_imports(imports: object) -> tuple[set, dict[str, set]]:
    """``(module, alias)`` of every ``import`` and ``module -> {(name, alias)}`` of every
    ``from`` import, duplicates merged."""
    straight: set[tuple[str, str | None]] = set()
    members: dict[str, set[tuple[str, str | None]]] = {}
    for node in imports:
        for item in node.imports if isinstance(node, ImportGroup) else [node]:
            if isinstance(item, Import):
                module, _, alias = item.module.partition(" as ")
                straight.add((module, alias or None))
            elif isinstance(item, ImportFrom):
                for name in item.names:
                    member, _, alias = name.partition(" as ")
                    members.setdefault(item.module, set()).add((member, alias or None))
            else:
                raise TypeError(f"not an import: {item!r}")
    return straight, members


def _from_statements(module: str, names: set) -> list[list[tuple[str, str | None]]]:
    """The ``from module import`` statements for ``names``: the plain names together, each
    ``x as y`` alone, names sorted by :func:`_member_key`."""
    ordered = sorted(names, key=lambda name: _member_key(*name))
    plain = [name for name in ordered if name[1] is None]
    return ([plain] if plain else []) + [[name] for name in ordered if name[1] is not None]


# ----------------------------------------------------------------------------- statements


def _statement_lines(stmt: object, indent: int) -> list[str]:
    """The lines of one statement (the leading comments of an assignment included)."""
    pad = " " * indent
    if isinstance(stmt, Docstring):
        return _docstring_lines(stmt.text, indent)
    if isinstance(stmt, Comment):
        return [pad + line for line in _own_line_comments((stmt.text,))]
    if isinstance(stmt, Import | ImportFrom):
        return _import_lines(stmt, indent)
    if isinstance(stmt, ImportGroup):
        return [line for item in stmt.imports for line in _import_lines(item, indent)]
    if isinstance(stmt, Assign | AnnAssign):
        comments = [pad + line for line in _own_line_comments(stmt.comments)]
        if isinstance(stmt, AnnAssign):
            lines = _ann_assign_lines(stmt, indent)
        else:
            head = _Text(f"{pad}{stmt.target} = ")
            lines = _value_lines(stmt.value, indent, head, _trailing_comment(stmt.trailing))
        return comments + [line.text for line in lines]
    if isinstance(stmt, Return):
        if stmt.value is None:
            return [pad + "return"]
        lines = _value_lines(stmt.value, indent, _Text(pad + "return "), _NOTHING)
        return [line.text for line in lines]
    if isinstance(stmt, FunctionDef | ClassDef):
        return _definition_lines(stmt, indent)
    raise TypeError(f"not a statement: {stmt!r}")


def _ann_assign_lines(stmt: AnnAssign, indent: int) -> list[_Text]:
    """``x: T = value`` or ``x: T``; see :func:`_annotated_value_lines`."""
    head = _Text(f"{' ' * indent}{stmt.target}: ")
    simple = _is_simple_annotation(stmt.annotation)
    if stmt.value is None:
        lines = _best_fit_lines(stmt.annotation, False, indent, head, _NOTHING)
        if simple or all(line.fits() for line in lines):
            return lines
        raise _annotation_error(stmt.annotation)
    head += stmt.annotation + " = "
    if simple:
        return _value_lines(stmt.value, indent, head, _NOTHING)
    return _annotated_value_lines(stmt.value, indent, head, stmt.annotation)


def _definition_lines(stmt: FunctionDef | ClassDef, indent: int) -> list[str]:
    """Decorators, the ``def``/``class`` line, and the indented body."""
    pad = " " * indent
    lines = []
    for decorator in stmt.decorators:
        lines += [line.text for line in _layout(decorator, indent, _Text(pad + "@"), _NOTHING)]
    if isinstance(stmt, FunctionDef):
        returns = "" if stmt.returns is None else f" -> {stmt.returns}"
        header = f"{pad}def {stmt.name}(){returns}:"
        if _width(header) > LINE_WIDTH:
            raise ValueError(f"the line {header.strip()!r} is longer than {LINE_WIDTH} columns")
        lines.append(header)
        kind = "function"
    else:
        if stmt.bases:
            bases = Call(Ref(stmt.name), [Arg(base) for base in stmt.bases])
            header = _layout(bases, indent, _Text(pad + "class "), _Text(":"))
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
    if isinstance(unit.stmt, _DEFINITIONS) or isinstance(previous.stmt, _DEFINITIONS):
        return around_definition
    if after_docstring:
        return 0 if kind == "function" else 1
    if isinstance(previous.stmt, _IMPORTS):
        if isinstance(unit.stmt, _IMPORTS) and not unit.comments:
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
