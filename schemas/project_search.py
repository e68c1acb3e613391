"""Which ``pyproject.toml`` applies in a folder: the search that ``titan.schemas.project`` reads.

The nearest ``pyproject.toml`` at or above the folder wins, up to the repository root (the
folder holding ``.git``, a folder or a worktree's file), as ruff and pre-commit look. Outside any
repository the search goes no higher than the working folder, and only the folder itself counts
when it lies outside the working folder: a ``pyproject.toml`` left in a shared ``/tmp`` or a
home folder above the project never applies unasked (:func:`passed_over` names one the search
met and did not apply, so a command can say so).

The walk up is cached per folder (it runs for every file of a pre-commit hook). Only ``os``.
"""

from __future__ import annotations

import os

PYPROJECT = "pyproject.toml"

_nearest: dict[str, tuple[str | None, bool]] = {}
"""Folder -> the ``pyproject.toml`` nearest above it up to the repository root (None: none), and
whether the folder is inside a repository."""


def applying(start: str) -> str | None:
    """The ``pyproject.toml`` that applies in the absolute folder ``start``, or ``None``."""
    return _find(start)


def passed_over(start: str) -> str | None:
    """The nearest ``pyproject.toml`` above ``start`` that does not apply there (outside any
    repository, above the working folder), or ``None``."""
    nearest, _ = _nearest_above(start)
    return nearest if nearest is not None and _find(start) is None else None


def forget_search() -> None:
    """Drop the cached walks (for a long-lived process whose projects change layout)."""
    _nearest.clear()


def _find(start: str) -> str | None:
    """The ``pyproject.toml`` that applies in ``start``: the nearest at or above it up to the
    repository root; outside any repository, no higher than the working folder (only ``start``
    itself when ``start`` is not inside the working folder)."""
    found, in_repository = _nearest_above(start)
    if found is None or in_repository:
        return found
    try:
        here = os.getcwd()
    except OSError:  # the working folder was removed: only the file's own folder
        here = start
    top = here if _inside(start, here) else start
    return found if _inside(os.path.dirname(found), top) else None


def _nearest_above(start: str) -> tuple[str | None, bool]:
    """The nearest ``pyproject.toml`` at or above ``start`` (up to the repository root, or the
    file system's root outside any), and whether ``start`` is inside a repository."""
    if start in _nearest:
        return _nearest[start]
    folder, found = start, None
    while True:
        candidate = os.path.join(folder, PYPROJECT)
        if found is None and os.path.isfile(candidate):
            found = candidate
        if os.path.exists(os.path.join(folder, ".git")):
            answer = (found, True)
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            answer = (found, False)
            break
        folder = parent
    _nearest[start] = answer
    return answer


def _inside(folder: str, top: str) -> bool:
    """Whether ``folder`` is ``top`` or below it (both absolute)."""
    return folder == top or folder.startswith(top.rstrip(os.sep) + os.sep)
