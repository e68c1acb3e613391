"""A TOML file as a list of statements, so that an edit can replace some and keep every other byte.

``tomllib`` gives values and forgets the text; tomlkit keeps the text, but its document model
appends a new key after the comments that introduce the *next* table and moves keys through
proxies when a table is split across the file. ``titan-validate --fix`` needs to say exactly
which lines it replaces, so the file is cut into statements here and each edit swaps whole
statements (tomlkit renders the new ones and edits a single statement's value)::

    # preamble               comment    table ()
    [training]  # tr         header     table ("training",)
    # per device             comment    table ("training",)
    batch_size = [           keyval     table ("training",), key ("batch_size",)
      8,                     ...        (one statement: the value runs over three lines)
    ]  # bs
                             blank

Joining the statements' ``text`` gives the file back, byte for byte; :func:`statements` checks
that. The text must be valid TOML (``tomllib`` accepted it): this module finds boundaries, it
does not validate. The edits at the end (tomlkit, imported only there) change one statement:
a value set, added or deleted inside it (in an array, only the elements that differ), or a key
inside its inline table renamed on the spot.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]+)*")
"""A key of bare parts only (``training.steps``), read without tomllib."""


LINKS = ("prev", "next", "order")
"""A statement's place in a ``titan.migrate.tomledit.statement_list.StatementList``."""


class LayoutError(ValueError):
    """The text could not be cut into statements (it is not valid TOML 1.0)."""


class Statement:
    """One line or one multi-line value of the file, with what it is and where it lives."""

    __slots__ = ("kind", "text", "table", "key", "in_array", "eq", "value_end", *LINKS)

    kind: str
    """``blank``, ``comment``, ``header``, ``array-header`` (``[[x]]``) or ``keyval``."""
    text: str
    """The exact source, from the start of its first line to its last newline (inclusive)."""
    table: tuple[str, ...]
    """A header's own path; for other statements the path of the table they are written in."""
    key: tuple[str, ...]
    """A keyval's key parts (``a.b = 1`` gives ``("a", "b")``); ``()`` for other kinds."""
    in_array: bool
    """Whether the statement is an ``[[array]]`` header or lies in one's table (never edited)."""
    eq: int
    """A keyval's ``=`` position in ``text``."""
    value_end: int
    """Where a keyval's value (a header's closing bracket) ends in ``text``: before the
    spaces, the comment and the newline that follow it."""

    def __init__(self, kind: str, text: str, table: tuple[str, ...], **keyval: Any) -> None:
        self.kind = kind
        self.text = text
        self.table = table
        self.key = keyval.get("key", ())
        self.in_array = keyval.get("in_array", False)
        self.eq = keyval.get("eq", -1)
        self.value_end = keyval.get("value_end", -1)
        self.prev: Statement | None = None
        self.next: Statement | None = None
        self.order = 0

    @property
    def path(self) -> tuple[str, ...]:
        """A keyval's full dotted path, a header's table path."""
        return self.table + self.key

    @property
    def indent(self) -> str:
        return self.text[: len(self.text) - len(self.text.lstrip(" \t"))]

    @property
    def key_text(self) -> str:
        """The key as written (``batch_size``, ``"a.b".c``)."""
        return self.text[len(self.indent) : self.eq].rstrip(" \t")

    @property
    def separator(self) -> str:
        """What the file writes between key and value (`` = ``, ``=``)."""
        start = len(self.indent) + len(self.key_text)
        value = self.eq + 1
        while self.text[value] in " \t":
            value += 1
        return self.text[start:value]

    @property
    def value_text(self) -> str:
        return self.text[
            len(self.indent) + len(self.key_text) + len(self.separator) : self.value_end
        ]

    @property
    def tail(self) -> str:
        """What follows the value (or header) on its last line: spaces and a comment, without
        the newline."""
        return self.text[self.value_end :].rstrip("\r\n")

    @property
    def newline(self) -> str:
        return self.text[len(self.text.rstrip("\r\n")) :]

    def value(self) -> Any:
        """A keyval's value, as ``tomllib`` reads it."""
        value: Any = tomllib.loads("x = " + self.value_text)["x"]
        return value

    def __repr__(self) -> str:
        return f"Statement({self.kind!r}, {self.text!r}, table={self.table!r}, key={self.key!r})"


def statements(
    text: str,
    *,
    table: tuple[str, ...] = (),
    in_array: bool = False,
    under: Any = None,
) -> list[Statement]:
    """Cut ``text`` (valid TOML) into statements; raises :class:`LayoutError` otherwise.

    A part of a file (whole lines) is cut in its place: ``table`` and ``in_array`` are those of
    the statement above it, and ``under(table)`` says whether an array of tables declared above
    the part holds ``table``."""
    found: list[Statement] = []
    arrays: set[tuple[str, ...]] = set()  # the [[array]] tables declared so far
    position = 0
    while position < len(text):
        line_end = _line_end(text, position)
        line = text[position:line_end]
        code = line.strip(" \t\r\n")
        if not code or code.startswith("#"):
            found.append(
                Statement("blank" if not code else "comment", line, table, in_array=in_array)
            )
            position = line_end
            continue
        end, eq, value_end = _statement_end(text, position)
        chunk = text[position:end]
        if code.startswith("["):
            array = code.startswith("[[")
            table = _header_path(chunk, array=array)
            in_array = array or _under(table, arrays) or bool(under and under(table))
            if array:
                arrays.add(table)
            kind = "array-header" if array else "header"
            code_end = len(_cut_comment(chunk.rstrip("\r\n")))
            found.append(Statement(kind, chunk, table, in_array=in_array, value_end=code_end))
        else:
            if eq < 0:
                raise LayoutError(f"no `=` in {chunk.strip()!r}")
            key = _key_parts(text[position:eq])
            found.append(
                Statement(
                    "keyval",
                    chunk,
                    table,
                    key=key,
                    in_array=in_array,
                    eq=eq - position,
                    value_end=value_end - position,
                )
            )
        position = end
    if "".join(s.text for s in found) != text:
        raise LayoutError("the statements do not join back into the file")
    return found


def _under(table: tuple[str, ...], arrays: set[tuple[str, ...]]) -> bool:
    """Whether ``table`` lies inside one of the arrays of tables ``arrays``."""
    return any(table[:end] in arrays for end in range(1, len(table)))


def _line_end(text: str, position: int) -> int:
    newline = text.find("\n", position)
    return len(text) if newline < 0 else newline + 1


def _statement_end(text: str, position: int) -> tuple[int, int, int]:
    """Where the statement starting at ``position`` ends (after its newline), where its first
    top-level ``=`` is (-1 for a header) and where its value ends (before spaces and comment).

    One pass over the characters: strings (four kinds) and comments are skipped as a whole,
    brackets are counted, and the statement ends at the first newline outside them all.
    """
    depth = 0
    eq = -1
    code_end = position
    i = position
    n = len(text)
    while i < n:
        char = text[i]
        if char == "\n":
            if depth == 0:
                return i + 1, eq, code_end
            i += 1
        elif char in " \t\r":
            i += 1
        elif char == "#":
            i = text.find("\n", i)
            if i < 0:
                i = n
        elif char in "\"'":
            i = _string_end(text, i)
            code_end = i
        else:
            if char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
            elif char == "=" and depth == 0 and eq < 0:
                eq = i
            i += 1
            code_end = i
    return n, eq, code_end


def _string_end(text: str, start: int) -> int:
    quote = text[start]
    if text.startswith(quote * 3, start):
        close = start + 3
        while True:
            close = text.find(quote * 3, close)
            if close < 0:
                raise LayoutError("an unclosed multi-line string")
            if quote == '"' and _escaped(text, close):
                close += 1
                continue
            end = close + 3
            while end < len(text) and text[end] == quote and end - close < 5:
                end += 1  # up to two quotes of the content may end the string
            return end
    i = start + 1
    while i < len(text) and text[i] != quote and text[i] != "\n":
        i += 2 if quote == '"' and text[i] == "\\" else 1
    if i >= len(text) or text[i] != quote:
        raise LayoutError("an unclosed string")
    return i + 1


def _escaped(text: str, position: int) -> bool:
    """Whether the character at ``position`` follows an odd number of backslashes."""
    count = 0
    while position - count - 1 >= 0 and text[position - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _key_parts(key_text: str) -> tuple[str, ...]:
    """The parts of a (possibly dotted, possibly quoted) key, decoded by tomllib itself."""
    stripped = key_text.strip(" \t\r\n")
    if _BARE_KEY.fullmatch(stripped):  # bare parts: nothing to decode
        return tuple(part.strip(" \t") for part in stripped.split("."))
    try:
        table: Any = tomllib.loads(key_text.strip() + " = 0")
    except tomllib.TOMLDecodeError as error:
        raise LayoutError(f"cannot read the key {key_text.strip()!r}: {error}") from None
    parts = []
    while isinstance(table, dict):
        (name, table), *_ = table.items()
        parts.append(name)
    return tuple(parts)


def _header_path(chunk: str, *, array: bool) -> tuple[str, ...]:
    code = chunk.strip(" \t\r\n")
    close = "]]" if array else "]"
    inner = _cut_comment(code[len(close) :])
    if not inner.endswith(close):
        raise LayoutError(f"cannot read the header {code!r}")
    return _key_parts(inner[: -len(close)])


def _cut_comment(code: str) -> str:
    """``code`` without a trailing comment (outside strings)."""
    i = 0
    while i < len(code):
        if code[i] in "\"'":
            i = _string_end(code, i)
        elif code[i] == "#":
            return code[:i].rstrip(" \t")
        else:
            i += 1
    return code.rstrip(" \t")


# --------------------------------------------------------------------------- edits (tomlkit)


def render_key(parts: tuple[str, ...]) -> str:
    """A key as TOML writes it: bare where it can be, quoted where it must, dotted."""
    import tomlkit

    return tomlkit.key(list(parts) if len(parts) > 1 else parts[0]).as_string()


def _item(value: Any) -> Any:
    import tomlkit

    if isinstance(value, dict):
        table = tomlkit.inline_table()
        for key, inner in value.items():
            table[key] = _item(inner)
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for inner in value:
            array.append(_item(inner))
        return array
    return tomlkit.item(value)


def render_value(value: Any) -> str:
    """A value as TOML writes it (a table as an inline table)."""
    return _item(value).as_string()


def edit_value(
    statement: Statement, rest: tuple[str, ...], value: Any, *, add: bool = False
) -> str:
    """The statement with the value at ``rest`` (inside its inline table; ``()`` for its own
    value) set to ``value``, added (``add``), or deleted (``value`` None)."""
    import tomlkit

    mini = tomlkit.parse(statement.text)
    container: Any = mini
    path = (*statement.key, *rest)
    for part in path[:-1]:
        if part not in container:
            container[part] = tomlkit.inline_table()
        container = container[part]
    last = path[-1]
    if add:
        container[last] = _item(value)
    elif value is None:
        del container[last]
        _drop_empty(mini, path[:-1])
    else:
        _set(container, last, value)
    return mini.as_string()


def _drop_empty(mini: Any, path: tuple[str, ...]) -> None:
    """Delete the inline tables on ``path`` that a deletion left empty (innermost first)."""
    for end in range(len(path), 0, -1):
        parent: Any = mini
        for part in path[: end - 1]:
            parent = parent[part]
        if len(parent[path[end - 1]]) == 0:
            del parent[path[end - 1]]
        else:
            return


def _set(container: Any, key: str, want: Any) -> None:
    """Set ``container[key]`` to ``want``, rewriting only what differs: in a table only the keys
    that change, in an array only the elements that change (its layout and comments stay)."""
    have = container[key]
    have = have.unwrap() if hasattr(have, "unwrap") else have  # a bool comes back as a bool
    if isinstance(have, dict) and isinstance(want, dict):
        for name in have:
            if name not in want:
                del container[key][name]
        for name, inner in want.items():
            if name not in have:
                container[key][name] = _item(inner)
            elif not same_value(have[name], inner):
                _set(container[key], name, inner)
        return
    if isinstance(have, list) and isinstance(want, list):
        array = container[key]
        for index in range(min(len(have), len(want))):
            if not same_value(have[index], want[index]):
                array[index] = _item(want[index])
        for index in range(len(have) - 1, len(want) - 1, -1):
            del array[index]
        for inner in want[len(have) :]:
            array.append(_item(inner))
        return
    container[key] = _item(want)


def rename_key(statement: Statement, rest: tuple[str, ...], name: str) -> str:
    """The statement with the key at ``rest`` inside its inline table renamed ``name``, on the
    spot: nothing else of the statement changes. Raises :class:`LayoutError` if not found."""
    from titan.schemas.spans import locate_keys

    span = locate_keys(statement.text).get((*statement.key, *rest))
    if span is None:
        raise LayoutError(f"cannot find the key {'.'.join(rest)!r} in {statement.text.strip()!r}")
    lines = statement.text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: span.line - 1])
    text = statement.text
    return text[: start + span.col - 1] + render_key((name,)) + text[start + span.end_col - 1 :]


def same_value(value: Any, other: Any) -> bool:
    """Equal with the same types all the way down (``1 == True`` is not the same TOML)."""
    if type(value) is not type(other):
        return False
    if isinstance(value, dict):
        return value.keys() == other.keys() and all(same_value(value[k], other[k]) for k in value)
    if isinstance(value, list):
        return len(value) == len(other) and all(map(same_value, value, other))
    return bool(value == other)
