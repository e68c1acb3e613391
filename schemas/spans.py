"""Source positions of the keys in a TOML document.

``tomllib`` turns text into plain dicts and throws every position away, so on its own the
validator could say *which* key is wrong but not *where* it is. This module scans the same text
once more and maps every key path to the place its key token is written, so that a diagnostic can
point at ``file:line:col`` of the offending key.

The scanner is not a parser: the caller only hands it text that ``tomllib.loads`` accepted, so it
never validates, it only has to find keys. It is still total (any string returns a possibly
partial mapping, never an exception or a hang), because a crash while *locating* an error must
never hide the error itself.

Paths are tuples of decoded key strings, with ``int`` components for positions in arrays: keys
in the n-th ``[[srv]]`` block live under ``("srv", n, ...)`` and ``("srv", n)`` itself is
recorded at that block's header; inline tables inside inline arrays get the element's index.
Columns count characters (a tab is one column) and do not count a leading byte order mark.

The same scan finds every key and table a file defines twice (:func:`duplicate_keys`), which
``tomllib`` reports only one of before it stops; it runs only for a file that failed to parse.
"""

from __future__ import annotations

import bisect
import contextlib
import re

from titan.schemas._frozen import Frozen, _set

Path = tuple[str | int, ...]


class KeySpan(Frozen):
    """Where one key token is written; lines and columns start at 1, ``end_col`` is exclusive."""

    __slots__ = ("line", "col", "end_col", "value_line")
    __match_args__ = ("line", "col", "end_col", "value_line")

    line: int
    """Line of the key token's first character."""
    col: int
    """Column (in characters) of the key token's first character."""
    end_col: int
    """Column just past the key token; a quoted key includes its quotes."""
    value_line: int | None
    """Line where the value of a ``key = value`` starts; ``None`` for table headers."""

    def __init__(self, line: int, col: int, end_col: int, value_line: int | None) -> None:
        _set(self, "line", line)
        _set(self, "col", col)
        _set(self, "end_col", end_col)
        _set(self, "value_line", value_line)


# Every quantifier that can meet a long run of input is possessive (``*+``) and the alternatives
# inside a repetition start with disjoint characters, so no pattern can backtrack: each match is
# linear in what it consumes.
_WS = re.compile(r"[ \t]*+")
# Blank lines and comments; also between array elements and (leniently) inside inline tables.
_BLANK = re.compile(r"(?:[ \t\r\n]|#[^\n]*+)*+")
# Lenient on purpose: TOML 1.0 bare keys are [A-Za-z0-9_-], but accepting anything that cannot
# end a key also covers TOML 1.1's Unicode bare keys and cannot misread a valid file.
_BARE = re.compile(r"[^ \t\r\n=.\[\]{},#\"']++")
_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*+"')
_LITERAL = re.compile(r"'[^'\n]*+'")
# Content may hold runs of one or two quotes; the closing run may be up to five quotes long,
# the first ones belonging to the content.
_ML_BASIC = re.compile(r'"""(?:[^"\\]|\\.|""?+(?!"))*+"{3,5}', re.DOTALL)
_ML_LITERAL = re.compile(r"'''(?:[^']|''?+(?!'))*+'{3,5}")
# The common line: a bare key, then a value that ends on its line (not an array, an inline table
# or a multi-line string, and a string only if it is closed on that line): what ``keyval`` and
# ``value`` would find, in one match.
_SIMPLE_KEYVAL = re.compile(
    f"({_BARE.pattern})[ \\t]*+=[ \\t]*+(?!\"\"\"|''')"
    f"(?=[^\\[{{\"']|{_BASIC.pattern}|{_LITERAL.pattern}|\\Z)"
)
# Numbers, booleans and dates need no structure, only an end; a local date-time may hold a space.
_SCALAR = re.compile(r"[^,\]}#\n]*+")
# ``\e`` and ``\xHH`` are TOML 1.1; accepting them costs nothing for 1.0 input.
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|x([0-9A-Fa-f]{2})|(.))", re.S)
_ESCAPES = {
    "b": "\b",
    "t": "\t",
    "n": "\n",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    '"': '"',
    "\\": "\\",
}
# Real configs nest a handful of levels; the cap keeps hostile input (``a.a.a...`` fifty thousand
# times) from building a quadratic number of path components, or from exhausting the stack.
_MAX_DEPTH = 100


def _unescape_match(m: re.Match[str]) -> str:
    hex_digits = m[1] or m[2] or m[3]
    if hex_digits:
        code = int(hex_digits, 16)
        return chr(code) if code <= 0x10FFFF else m[0]
    return _ESCAPES.get(m[4], m[0])


def locate_keys(text: str) -> dict[Path, KeySpan]:
    """Map every key path in ``text`` to the span of its first key token.

    Table headers record each of their components (``[a.b]`` gives ``("a",)`` and ``("a", "b")``),
    dotted keys likewise; for every path only its first occurrence in the file is kept.
    """
    scanner = _Scanner(text)
    # Positions are a nicety: partial results (also after _TooDeep) beat a crash.
    with contextlib.suppress(Exception):
        scanner.run()
    return scanner.spans


# How a path is written, for :class:`_Duplicates`: a ``key = value`` (its value, inline tables
# and arrays included), a table a dotted key opens (``a`` of ``a.b = 1``), one a header opens on
# the way (``a`` of ``[a.b]``), a ``[header]`` and an ``[[array of tables]]``.
_VALUE, _DOTTED, _IMPLICIT, _HEADER, _ARRAY = "value", "dotted", "implicit", "header", "array"


class _TooDeep(Exception):
    """Raised past ``_MAX_DEPTH`` to stop the scan; what was found so far is kept."""


class _Scanner:
    """One left-to-right pass over the text with an index; methods advance ``self.i``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        # A BOM is invisible in editors, so line 1 starts after it and columns ignore it.
        self.i = 1 if text.startswith("\ufeff") else 0
        self.line_starts = [self.i]
        newline = text.find("\n")
        while newline != -1:
            self.line_starts.append(newline + 1)
            newline = text.find("\n", newline + 1)
        self.spans: dict[Path, KeySpan] = {}
        # Elements seen so far of each array of tables, keyed by its resolved path, so that
        # ``[[a.b]]`` under the second ``[[a]]`` starts counting again from 0.
        self.aot_counts: dict[Path, int] = {}

    def run(self) -> None:
        table: Path = ()
        text, n, spans, line_starts = self.text, self.n, self.spans, self.line_starts
        while True:
            self.skip(_BLANK)
            i = self.i
            if i >= n:
                return
            if text[i] == "[":
                table = self.header(table)
            elif (simple := _SIMPLE_KEYVAL.match(text, i)) is not None:
                # What keyval, record and value do for such a line, without a dozen calls: the
                # scan costs as much as parsing the file, and most lines are like this.
                path = (*table, simple[1])
                if path not in spans:
                    line = bisect.bisect_right(line_starts, i)
                    base = line_starts[line - 1] - 1
                    spans[path] = KeySpan(line, i - base, simple.end(1) - base, line)
                else:  # never in a file that parses: a key written twice
                    self.record(path, i, simple.end(1), self.line_of(i))
                if len(path) > _MAX_DEPTH:
                    raise _TooDeep
            else:
                self.keyval(table)
            self.end_line()

    def skip(self, pattern: re.Pattern[str]) -> None:
        self.i = pattern.match(self.text, self.i).end()  # type: ignore[union-attr]  # all match ""

    def end_line(self) -> None:
        # Anything unexpected left on the line is skipped, which also guarantees progress.
        newline = self.text.find("\n", self.i)
        self.i = self.n if newline == -1 else newline + 1

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos)

    def record(
        self, path: Path, start: int, end: int, value_line: int | None, kind: str = _VALUE
    ) -> None:
        """Note where ``path`` is written; ``kind`` says how (see :class:`_Duplicates`)."""
        if path not in self.spans:
            line = self.line_of(start)
            base = self.line_starts[line - 1] - 1
            self.spans[path] = KeySpan(line, start - base, end - base, value_line)

    def header(self, table: Path) -> Path:
        is_array = self.text.startswith("[[", self.i)
        self.i += 2 if is_array else 1
        self.skip(_WS)
        keys = self.dotted_key()
        if not keys:
            return table
        path: Path = ()
        last = len(keys) - 1
        for k, (name, start, end) in enumerate(keys):
            path += (name,)
            kind = _IMPLICIT if k < last else _ARRAY if is_array else _HEADER
            self.record(path, start, end, None, kind)
            if is_array and k == last:
                index = self.aot_counts.get(path, 0)
                self.aot_counts[path] = index + 1
                path += (index,)
                self.record(path, start, end, None, _HEADER)
            elif path in self.aot_counts:
                # A header through an array of tables continues its latest element.
                path += (self.aot_counts[path] - 1,)
        return path

    def dotted_key(self) -> list[tuple[str, int, int]]:
        keys = []
        while (key := self.simple_key()) is not None:
            keys.append(key)
            if len(keys) > _MAX_DEPTH:
                raise _TooDeep
            self.skip(_WS)
            if self.i >= self.n or self.text[self.i] != ".":
                break
            self.i += 1
            self.skip(_WS)
        return keys

    def simple_key(self) -> tuple[str, int, int] | None:
        start = self.i
        char = self.text[start : start + 1]
        pattern = _BASIC if char == '"' else _LITERAL if char == "'" else _BARE
        m = pattern.match(self.text, start)
        if m is None:
            return None
        self.i = end = m.end()
        token = m[0]
        if char == '"':
            return _ESCAPE.sub(_unescape_match, token[1:-1]), start, end
        if char == "'":
            return token[1:-1], start, end
        return token, start, end

    def keyval(self, table: Path) -> None:
        keys = self.dotted_key()
        self.skip(_WS)
        if not keys or self.i >= self.n or self.text[self.i] != "=":
            return
        self.i += 1
        self.skip(_WS)
        value_line = self.line_of(self.i)
        path = table
        last = len(keys) - 1
        for k, (name, start, end) in enumerate(keys):
            path += (name,)
            self.record(path, start, end, value_line, _DOTTED if k < last else _VALUE)
        self.value(path)

    def value(self, path: Path) -> None:
        if len(path) > _MAX_DEPTH:
            raise _TooDeep
        text, i = self.text, self.i
        char = text[i : i + 1]
        if char == "{":
            self.inline_table(path)
        elif char == "[":
            self.array(path)
        elif char == '"' or char == "'":
            triple = text.startswith(char * 3, i)
            if triple:
                m = (_ML_BASIC if char == '"' else _ML_LITERAL).match(text, i)
            else:
                m = (_BASIC if char == '"' else _LITERAL).match(text, i)
            if m is not None:
                self.i = m.end()
            elif triple:
                # An unclosed multi-line string runs to the end; rescanning would be quadratic.
                self.i = self.n
            else:
                self.end_line()
        else:
            self.skip(_SCALAR)

    def inline_table(self, path: Path) -> None:
        self.i += 1
        while True:
            self.skip(_BLANK)
            if self.i >= self.n:
                return
            char = self.text[self.i]
            if char == "}" or char == ",":
                self.i += 1
                if char == "}":
                    return
                continue
            start = self.i
            self.keyval(path)
            if self.i == start:
                return

    def array(self, path: Path) -> None:
        self.i += 1
        index = 0
        while True:
            self.skip(_BLANK)
            if self.i >= self.n:
                return
            char = self.text[self.i]
            if char == "]" or char == ",":
                self.i += 1
                if char == "]":
                    return
                index += 1
                continue
            start = self.i
            self.value((*path, index))
            if self.i == start:
                return


class Duplicate(Frozen):
    """A key or table written a second time, where TOML allows one definition."""

    __slots__ = ("path", "at", "first", "kind", "first_kind")
    __match_args__ = ("path", "at", "first")

    path: Path
    """The path defined twice."""
    at: KeySpan
    """Where the second definition's key token is."""
    first: KeySpan
    """Where the path was first written."""
    kind: str
    """How the second one writes it: ``value``, ``dotted``, ``implicit``, ``header``, ``array``."""
    first_kind: str
    """How the first one wrote it (same words)."""

    def __init__(self, path: Path, at: KeySpan, first: KeySpan, kind: str, first_kind: str) -> None:
        _set(self, "path", path)
        _set(self, "at", at)
        _set(self, "first", first)
        _set(self, "kind", kind)
        _set(self, "first_kind", first_kind)


def duplicate_keys(text: str) -> list[Duplicate]:
    """Every key and table of ``text`` defined a second time, in file order.

    ``tomllib`` stops at the first one; this finds them all in one scan. It follows TOML's
    rules for what may be written twice: a table opened on the way by a header or a dotted key
    may be declared later, an array of tables may grow, anything else is defined once. Keys
    inside a value already reported (the second ``x = {a = 1}``) are not reported again.
    """
    scanner = _Duplicates(text)
    with contextlib.suppress(Exception):
        scanner.run()
    return scanner.found


# (first kind, later kind) pairs TOML accepts; every other pair defines a path twice.
_REDEFINABLE = frozenset(
    {
        (_IMPLICIT, _IMPLICIT),
        (_IMPLICIT, _HEADER),  # [a.b] then [a]
        (_IMPLICIT, _DOTTED),  # [a.b.c] then [a] b.d = 1
        (_DOTTED, _DOTTED),  # a.b = 1 then a.c = 2
        (_DOTTED, _IMPLICIT),  # a.b = 1 then [a.c]
        (_HEADER, _IMPLICIT),  # [a] then [a.b]
        (_ARRAY, _ARRAY),  # [[a]] twice: two elements
        (_ARRAY, _IMPLICIT),  # [[a]] then [a.b]: a table in its last element
    }
)


class _Duplicates(_Scanner):
    """The scanner, also remembering how each path was written to spot a second definition."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.kinds: dict[Path, str] = {}
        self.found: list[Duplicate] = []
        self.reported: list[Path] = []

    def record(
        self, path: Path, start: int, end: int, value_line: int | None, kind: str = _VALUE
    ) -> None:
        first = self.spans.get(path)
        if first is None:
            super().record(path, start, end, value_line, kind)
            self.kinds[path] = kind
            return
        # A path the fast path recorded has no kind yet: it was a plain `key = value`.
        before = self.kinds.get(path, _VALUE)
        if (before, kind) in _REDEFINABLE:
            if kind == _HEADER or (before, kind) == (_IMPLICIT, _DOTTED):
                self.kinds[path] = kind
            return
        if any(path[: len(done)] == done for done in self.reported):
            return  # inside a value already reported
        line = self.line_of(start)
        base = self.line_starts[line - 1] - 1
        at = KeySpan(line, start - base, end - base, value_line)
        self.found.append(Duplicate(path, at, first, kind, before))
        if kind == _VALUE:
            self.reported.append(path)
