"""The comments of a TOML document, attached to the keys and table headers they annotate.

``tomllib`` drops comments, but the migrator wants to carry them next to the keyword arguments it
generates. :func:`toml_comments` maps key paths (the paths of :func:`titan.schemas.spans.locate_keys`:
decoded key strings, ``int`` components for array-of-tables elements) to a :class:`KeyComments`;
:func:`preamble` gives the file's opening comment block and :func:`orphans` every comment that
belongs to no key. Together the three account for every comment of the file exactly once.

Rules:

- A ``#`` starts a comment only outside strings: ``channel = "#pt-infra-alerts"`` has none, and
  neither do ``'...'``, ``\"\"\"...\"\"\"`` or ``'''...'''`` strings (which may hold ``#``, quotes and
  newlines) or quoted keys.
- The text of a comment is what follows the ``#``, minus one leading space if there is one and
  minus trailing spaces, tabs and carriage returns; everything else (inner spaces, tabs, any
  Unicode) is kept as written. A bare ``#`` gives ``""``.
- A *comment line* holds nothing but a comment. Commented-out TOML (``# converters = ["x"]``)
  is a comment line like any other; the caller decides what to do with it.
- A *statement* is a ``key = value`` or a table header together with all the lines its value
  runs over (multi-line arrays, inline tables, multi-line strings). Only the statement's own key
  gets comments: the full dotted key (``a.b = 1`` gives ``(..., "a", "b")``; ``("a",)`` gets
  nothing), the full header path (``[a.b]`` gives ``("a", "b")``, ``[[a]]`` gives ``("a", n)``).
  Keys inside inline tables get none.
- ``leading``: the comment lines directly above the statement, up to the nearest line that is not
  a comment line. A blank line between a comment block and a statement detaches the block.
- ``trailing``: the comment at the end of the statement's *last* line, so for
  ``x = [\\n 1,\\n]  # note`` it is ``"note"``; for a header it is the comment on its line.
- The preamble is every comment line before the first statement, in order, blank lines dropped.
  When it runs straight into the first statement (no blank line) it is still the preamble only and
  never also that statement's ``leading``.
- Orphans: a comment block after the first statement that a blank line (or the end of the file)
  separates from the next statement; comments *inside* a multi-line value, including one after
  its opening ``[`` or ``{``; and the comments of a statement whose key cannot be found or
  already has comments (both only in text that is not valid TOML). They are reported with
  their 1-based line numbers.
- Only paths with at least one comment appear in the mapping.
- ``\\r\\n`` line endings, tabs and a leading byte order mark are fine (lines and columns are those
  of ``locate_keys``: line 1 starts after the mark).

Like ``locate_keys``, the functions are total: any string gives a (possibly partial) result in
linear time, never an exception or a hang. Callers hand them text that ``tomllib`` accepted; for
other text the results are best effort.
"""

from __future__ import annotations

import bisect
import contextlib
import re

from titan.schemas.spans import KeySpan, Path, locate_keys


class KeyComments:
    """The comments that belong to one key or table header."""

    __slots__ = ("leading", "trailing")
    __match_args__ = ("leading", "trailing")

    leading: tuple[str, ...]
    """The comment lines directly above the key, top to bottom."""
    trailing: str | None
    """The comment at the end of the key's last line, if any."""

    def __init__(self, leading: tuple[str, ...] = (), trailing: str | None = None) -> None:
        self.leading = leading
        self.trailing = trailing

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyComments):
            return NotImplemented
        return self.leading == other.leading and self.trailing == other.trailing

    def __hash__(self) -> int:
        return hash((self.leading, self.trailing))

    def __repr__(self) -> str:
        return f"KeyComments(leading={self.leading!r}, trailing={self.trailing!r})"


def toml_comments(text: str) -> dict[Path, KeyComments]:
    """Map each key and table-header path that has comments to them (see the module rules)."""
    return _analyze(text).comments


def preamble(text: str) -> tuple[str, ...]:
    """The comment lines before the first key or table header."""
    return tuple(_analyze(text).preamble)


def orphans(text: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment that is neither preamble nor a key's comment."""
    return sorted(_analyze(text).orphans)


# --------------------------------------------------------------------------- lexical pass

# Every repetition is possessive and its alternatives start with disjoint characters, so no
# pattern backtracks: each match is linear in what it consumes.
_PLAIN = re.compile(r"[^\"'#\[\]{}=\n]*+")
# Single-line strings stop at the end of their line when unterminated.
_BASIC = re.compile(r'"(?:[^"\\\n]|\\[^\n])*+"?')
_LITERAL = re.compile(r"'[^'\n]*+'?")
# The same multi-line patterns as titan.schemas.spans: content may hold runs of one or two quotes, and
# the closing run may be up to five quotes long.
_ML_BASIC = re.compile(r'"""(?:[^"\\]|\\.|""?+(?!"))*+"{3,5}', re.DOTALL)
_ML_LITERAL = re.compile(r"'''(?:[^']|''?+(?!'))*+'{3,5}")
_SPACE = " \t\r"


class _Lexed:
    """What one pass over the characters learns about each line (lists indexed by line - 1).

    ``comment_at`` and ``eq_at`` hold absolute positions (-1 for none): the ``#`` of the line's
    comment and its first ``=`` outside strings and brackets. ``continued`` is true when the line
    ends inside a value: inside brackets or a multi-line string.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.line_starts = _line_starts(text)
        count = len(self.line_starts)
        self.comment_at = [-1] * count
        self.eq_at = [-1] * count
        self.continued = [False] * count
        self.i = self.line_starts[0]
        self.line = 0
        self.depth = 0

    def run(self) -> None:
        """Scan the whole text once, filling the per-line lists."""
        text, n = self.text, self.n
        while True:
            self.i = _PLAIN.match(text, self.i).end()  # type: ignore[union-attr]  # matches ""
            if self.i >= n:
                return
            char = text[self.i]
            if char == "\n":
                self.continued[self.line] = self.depth > 0
                self.line += 1
                self.i += 1
            elif char == "#":
                self.comment()
            elif char == "[" or char == "{":
                self.depth += 1
                self.i += 1
            elif char == "]" or char == "}":
                self.depth = max(0, self.depth - 1)
                self.i += 1
            elif char == "=":
                if self.depth == 0 and self.eq_at[self.line] == -1:
                    self.eq_at[self.line] = self.i
                self.i += 1
            else:
                self.string(char)

    def comment(self) -> None:
        """Record the comment at ``self.i`` and move to the end of its line."""
        self.comment_at[self.line] = self.i
        newline = self.text.find("\n", self.i)
        self.i = self.n if newline == -1 else newline

    def string(self, quote: str) -> None:
        """Skip the string starting at ``self.i``, marking the lines a multi-line one spans."""
        text, start = self.text, self.i
        if text.startswith(quote * 3, start):
            m = (_ML_BASIC if quote == '"' else _ML_LITERAL).match(text, start)
            # An unclosed multi-line string runs to the end of the text.
            self.i = self.n if m is None else m.end()
            for _ in range(text.count("\n", start, self.i)):
                self.continued[self.line] = True
                self.line += 1
        else:
            pattern = _BASIC if quote == '"' else _LITERAL
            self.i = pattern.match(text, start).end()  # type: ignore[union-attr]  # matches a quote

    def line_end(self, k: int) -> int:
        """Position of the newline ending line ``k`` (or the end of the text)."""
        return self.line_starts[k + 1] - 1 if k + 1 < len(self.line_starts) else self.n

    def code_end(self, k: int) -> int:
        """Where the part of line ``k`` before its comment ends."""
        return self.comment_at[k] if self.comment_at[k] != -1 else self.line_end(k)

    def has_code(self, k: int) -> bool:
        """Whether line ``k`` holds anything but whitespace and a comment."""
        return bool(self.text[self.line_starts[k] : self.code_end(k)].strip(_SPACE))

    def comment_text(self, k: int) -> str:
        """The text of line ``k``'s comment: after ``#`` and one space, trailing space dropped."""
        raw = self.text[self.comment_at[k] + 1 : self.line_end(k)].rstrip(_SPACE)
        return raw[1:] if raw.startswith(" ") else raw


def _line_starts(text: str) -> list[int]:
    """Start position of every line; line 1 starts after a byte order mark, as in ``spans``."""
    starts = [1 if text.startswith("\ufeff") else 0]
    newline = text.find("\n")
    while newline != -1:
        starts.append(newline + 1)
        newline = text.find("\n", newline + 1)
    return starts


# --------------------------------------------------------------------------- statement keys


class _Keys:
    """The paths of ``locate_keys``, looked up by the line their key token is on."""

    def __init__(self, text: str, lexed: _Lexed) -> None:
        self.lexed = lexed
        self.spans = locate_keys(text)
        self.by_line: dict[int, list[tuple[Path, KeySpan]]] = {}
        for path, span in self.spans.items():
            self.by_line.setdefault(span.line, []).append((path, span))
        self.headers_by_names: dict[tuple, tuple[list[int], list[Path]]] | None = None

    def statement_path(self, k: int) -> Path | None:
        """The path of the key or header whose statement starts on line ``k`` (0-based)."""
        lexed = self.lexed
        start = lexed.line_starts[k]
        line_text = lexed.text[start : lexed.code_end(k)]
        found = self.by_line.get(k + 1, [])
        if line_text.lstrip(_SPACE).startswith("["):
            headers = [path for path, span in found if span.value_line is None]
            if headers:
                return max(headers, key=len)
            return self.reopened_header(k, line_text)
        eq = lexed.eq_at[k]
        if eq == -1:
            return None
        eq_col = eq - start + 1
        before = [(path, span) for path, span in found if span.col < eq_col]
        return max(before, key=lambda item: item[1].col)[0] if before else None

    def reopened_header(self, k: int, line_text: str) -> Path | None:
        """Path of a header ``locate_keys`` skipped: ``[a]`` after ``[a.b]`` already had ``("a",)``.

        The header's decoded names are those ``locate_keys`` finds in its line alone; the path is
        the latest one recorded above it with those names (``int`` components dropped), which
        puts it in the current element of any array of tables it goes through.
        """
        if line_text.lstrip(_SPACE).startswith("[["):
            return None
        names = max(locate_keys(line_text), key=len, default=None)
        if names is None:
            return None
        lines, paths = self.header_index().get(names, ([], []))
        index = bisect.bisect_left(lines, k + 1)
        return paths[index - 1] if index > 0 else None

    def header_index(self) -> dict[tuple, tuple[list[int], list[Path]]]:
        """Header paths by their names without ``int`` components: (lines, paths), by line."""
        if self.headers_by_names is None:
            self.headers_by_names = {}
            ordered = sorted(
                ((span.line, path) for path, span in self.spans.items() if span.value_line is None),
                key=lambda item: item[0],
            )
            for line, path in ordered:
                names = tuple(part for part in path if isinstance(part, str))
                lines, paths = self.headers_by_names.setdefault(names, ([], []))
                lines.append(line)
                paths.append(path)
        return self.headers_by_names


# --------------------------------------------------------------------------- assignment


class _Analysis:
    """The three results, filled in one walk over the lines."""

    def __init__(self) -> None:
        self.comments: dict[Path, KeyComments] = {}
        self.preamble: list[str] = []
        self.orphans: list[tuple[int, str]] = []


def _analyze(text: str) -> _Analysis:
    """Lex ``text``, find its statements and hand every comment to one of the three results."""
    analysis = _Analysis()
    # Comments are a nicety: a partial result beats a crash while migrating.
    with contextlib.suppress(Exception):
        lexed = _Lexed(text)
        lexed.run()
        _assign(lexed, _Keys(text, lexed), analysis)
    return analysis


def _assign(lexed: _Lexed, keys: _Keys, analysis: _Analysis) -> None:
    """Walk the lines: comment blocks wait for the next statement, which takes or drops them."""
    count = len(lexed.line_starts)
    pending: list[int] = []
    seen_statement = False
    k = 0
    while k < count:
        if not lexed.has_code(k):
            if lexed.comment_at[k] != -1:
                pending.append(k)
            else:
                _detach(lexed, pending, analysis, seen_statement)
            k += 1
            continue
        end = k
        while end + 1 < count and lexed.continued[end]:
            end += 1
        if not seen_statement:
            _detach(lexed, pending, analysis, seen_statement)
            seen_statement = True
        _statement(lexed, keys, pending, k, end, analysis)
        k = end + 1
    _detach(lexed, pending, analysis, seen_statement)


def _detach(lexed: _Lexed, pending: list[int], analysis: _Analysis, seen_statement: bool) -> None:
    """Send a comment block no statement takes to the preamble (before any statement) or orphans."""
    for k in pending:
        if seen_statement:
            analysis.orphans.append((k + 1, lexed.comment_text(k)))
        else:
            analysis.preamble.append(lexed.comment_text(k))
    pending.clear()


def _statement(
    lexed: _Lexed, keys: _Keys, pending: list[int], k: int, end: int, analysis: _Analysis
) -> None:
    """Give the statement on lines ``k..end`` its leading block and trailing comment.

    Comments inside the statement are orphans, and so are its own when its path is unknown or
    (only in invalid text) already has comments.
    """
    inner = [j for j in range(k, end) if lexed.comment_at[j] != -1]
    analysis.orphans.extend((j + 1, lexed.comment_text(j)) for j in inner)
    own = [*pending, end] if lexed.comment_at[end] != -1 else list(pending)
    pending.clear()
    if not own:
        return
    path = keys.statement_path(k)
    if path is None or path in analysis.comments:
        analysis.orphans.extend((j + 1, lexed.comment_text(j)) for j in own)
        return
    trailing = lexed.comment_text(end) if lexed.comment_at[end] != -1 else None
    leading = tuple(lexed.comment_text(j) for j in own if j != end)
    analysis.comments[path] = KeyComments(leading, trailing)
