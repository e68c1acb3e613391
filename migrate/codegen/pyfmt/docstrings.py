"""Docstrings as ruff prints them: normalized text, escaped quotes and backslashes, indented."""

from __future__ import annotations

from titan.migrate.codegen.pyfmt.text import escape_code

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
            parts.append(escape_code(char))
    return "".join(parts)


def docstring_lines(text: str, indent: int) -> list[str]:
    """The lines of a docstring statement at ``indent``."""
    pad = " " * indent
    lines = _escape_docstring(normalize_docstring(text)).split("\n")
    if len(lines) == 1:
        return [f'{pad}"""{lines[0] or " "}"""']
    middle = [pad + line if line else "" for line in lines[1:]]
    return [f'{pad}"""{lines[0]}', *middle, f'{pad}"""']
