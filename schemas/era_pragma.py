"""A file that says when it was written: the ``# titan: era = ...`` comment.

Nothing in a TOML key can say which torchtitan a file was written for, and a file whose keys all
still exist at v0.2.2 is undated (``titan.schemas.era_stakes``). One comment line settles it for
that file, as ``--era`` does for one run and ``[tool.titan] era`` for a whole project::

    # titan: era = v0.2.1

The value is what ``--era`` takes (a release, ``YYYY-MM`` or ``YYYY-MM-DD``). ``titan-validate
--fix`` writes it when it rewrites a file of an older era, so the fixed file keeps its date: its
flavor still means what it meant then. Only ``re`` is imported.
"""

from __future__ import annotations

import re

_PRAGMA = re.compile(
    r"^[ \t]*#[ \t]*titan[ \t]*:[ \t]*era\b[ \t]*[=:]?[ \t]*(?P<value>.*?)[ \t]*\r?$",
    re.MULTILINE | re.ASCII,
)

SOURCE = "`# titan: era` comment"
"""How reports name the comment as the source of a file's era."""


class Pragma:
    """The era comment of a file: its value as written and its line (1-based)."""

    __slots__ = ("value", "line", "problem")

    def __init__(self, value: str, line: int, problem: str | None) -> None:
        self.value = value
        self.line = line
        self.problem = problem
        """Why the value is not a usable era (``None`` when it is)."""


def find(text: str | None) -> Pragma | None:
    """The first ``# titan: era`` comment of ``text``, or ``None``."""
    if not text or "titan" not in text:
        return None
    found = _PRAGMA.search(text)
    if found is None:
        return None
    from titan.schemas.era_names import era_error

    value = found.group("value").strip().strip("\"'")
    line = text.count("\n", 0, found.start()) + 1
    problem = era_error(value)
    if problem is not None:
        problem = problem.replace(f"--era {value!r}", f"the era {value!r} of the comment")
    return Pragma(value, line, problem)


def era_of(text: str | None) -> str | None:
    """The usable era a file's comment names, or ``None``."""
    found = find(text)
    return found.value if found is not None and found.problem is None else None


def line(era: str) -> str:
    """The comment that dates a file to ``era``."""
    return f"# titan: era = {era}"


def insert(text: str, era: str) -> str:
    """``text`` with the comment dating it to ``era`` after its opening comment lines (a file's
    description stays its first line)."""
    lines = text.splitlines(keepends=True)
    end = 0
    while end < len(lines) and lines[end].lstrip().startswith("#"):
        end += 1
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    return "".join([*lines[:end], line(era) + newline, *lines[end:]])
