"""The project declaration as the commands that work on the working folder use it.

The declaration itself (the ``[tool.titan]`` table of the nearest ``pyproject.toml``, its keys
and how each is checked) is read by ``titan.schemas.project``, the one reader every command shares:
``titan-validate``, ``titan-migrate``, ``titan-diff`` and ``titan-train`` find the declaration of
each TOML there. This module is the working folder's view of it, for the folder walk of
``titan-validate``: ``registry-files`` are shell patterns matched against a file's path relative
to the folder of ``pyproject.toml`` (``*`` also crosses folders), and a folder walk checks those
``.py`` files as registry modules, besides every ``config_registry.py``. A declaration titan
cannot use is a usage error here, naming the file and the place, never ignored.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from typing import TextIO

from titan.cli.exits import UsageError
from titan.schemas.project import KEYS, Declaration, for_folder

__all__ = ["KEYS", "Declaration", "applied_to", "declaration", "declared_registry", "say_applied"]


def declaration(start: str | None = None) -> Declaration:
    """The declaration that applies in ``start`` (the working folder by default); raises
    ``UsageError`` for the first problem of one titan cannot use."""
    found = for_folder(start or os.getcwd())
    if found.problems:
        problem = found.problems[0]
        hint = f"; {problem.hint}" if problem.hint else ""
        raise UsageError(f"{problem.span}: {problem.message}{hint}")
    return found


def declared_registry(path: str) -> bool:
    """Whether the ``.py`` file ``path`` matches a declared ``registry-files`` pattern."""
    found = declaration()
    if not found.registry_files:
        return False
    relative = os.path.relpath(os.path.abspath(path), found.root).replace(os.sep, "/")
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in found.registry_files)


def applied_to(files: Iterable[str]) -> list[str]:
    """The ``pyproject.toml`` files (as reports name them) whose ``[tool.titan]`` table applied
    to the checked ``files``, each once."""
    from titan.schemas.project import applied

    return applied(_folders(files))


def say_applied(declared: list[str], *, files: Iterable[str], prog: str, stream: TextIO) -> None:
    """One note on ``stream`` per declaration applied to ``files`` (a ``[tool.titan]`` table
    changes what passes, so a report never relies on one silently), and one per declaration the
    walk up met but did not apply."""
    from titan.cli.exits import say
    from titan.schemas.project import not_applied

    for file in declared:
        say(f"{prog}: note: applied the [tool.titan] declaration of {file}", stream=stream)
    for file in not_applied(_folders(files)):
        say(
            f"{prog}: note: did not apply {file}: outside a repository titan reads the "
            "pyproject.toml of the working folder or below it (run from that folder, or make "
            "the project a git repository)",
            stream=stream,
        )


def _folders(files: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(os.path.dirname(os.path.abspath(f)) for f in files))
