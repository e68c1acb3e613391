"""Measured text: display widths, escaped string and number literals, and comments.

Widths count what a terminal shows (wide East Asian characters are 2 columns, combining marks
0), as ruff does when it decides whether a line fits.
"""

from __future__ import annotations

import unicodedata

LINE_WIDTH = 100
"""The line length of the project's ruff configuration."""

INDENT = 4
"""Spaces per indentation level."""

PRAGMAS = ("isort", "type", "pyright", "pyrefly", "pylint", "flake8", "ruff", "ty")
"""Comment prefixes (before a ``:``) that ruff treats as pragmas: they reserve no width."""


# ----------------------------------------------------------------------------- text and width


def _char_width(char: str) -> int:
    """Columns ruff counts for one character (the ``unicode-width`` rules it uses): 0 for
    combining marks and format characters, 2 for wide East Asian characters and emoji."""
    if unicodedata.category(char) in ("Mn", "Me", "Cf") or "\u1160" <= char <= "\u11ff":
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def text_width(text: str) -> int:
    """Columns ruff counts for ``text`` (no line breaks)."""
    if text.isascii():
        return len(text)
    return sum(_char_width(char) for char in text)


class Text:
    """A piece of one output line and the width ruff counts for it.

    The width differs from the text's only for pragma comments, which ruff does not count.
    """

    __slots__ = ("text", "width")

    def __init__(self, text: str, width: int | None = None) -> None:
        self.text = text
        self.width = text_width(text) if width is None else width

    def __add__(self, other: Text | str) -> Text:
        if isinstance(other, str):
            other = Text(other)
        return Text(self.text + other.text, self.width + other.width)

    def fits(self) -> bool:
        """True when the line is at most :data:`LINE_WIDTH` columns wide."""
        return self.width <= LINE_WIDTH


NOTHING = Text("", 0)


def indent_text(indent: int) -> Text:
    """The indentation of a line."""
    return Text(" " * indent, indent)


def escape_code(char: str) -> str:
    """``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN`` for one character (lower-case hex, as ruff)."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


_STRING_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(value: str) -> str:
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
            parts.append(escape_code(char))
    return quote + "".join(parts) + quote


def number_text(value: int | float) -> str:
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
            parts.append(_STRING_ESCAPES.get(char) or escape_code(char))
    return "".join(parts)


def _comment(text: str) -> str:
    """``# text`` for one comment line: non-printable characters escaped (so nothing can end
    the comment), trailing spaces dropped (ruff drops them), an empty text gives ``#``."""
    text = _printable(text).rstrip(" ")
    return f"# {text}" if text else "#"


def own_line_comments(texts: tuple[str, ...]) -> list[str]:
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
        or (bool(colon) and head in PRAGMAS)
    )


def trailing_comment(text: str | None) -> Text:
    """``  # text`` after code, with the width ruff reserves for it (0 for a pragma).

    Line breaks in the text are escaped like other non-printable characters: the comment must
    stay on its line.
    """
    if text is None:
        return NOTHING
    comment = _comment(text)
    return Text("  " + comment, 0 if _is_pragma(comment) else 2 + text_width(comment))
