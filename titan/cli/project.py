"""The project declaration: titan's settings in the ``[tool.titan]`` table of ``pyproject.toml``.

    [tool.titan]
    registry-files = ["configs/*.py", "experiments/**/registry_*.py"]

The declaration is the ``pyproject.toml`` nearest above the working folder, up to the repository
root (the folder holding ``.git``). ``registry-files`` are shell patterns matched against a file's
path relative to that folder (``*`` also crosses folders): a folder walk checks those ``.py``
files as registry modules, besides every ``config_registry.py``. A declaration titan cannot use
(a table that is not one, a pattern that is not a string, a key titan does not know) is a usage
error naming the file, never ignored.
"""

from __future__ import annotations

import fnmatch
import os

from titan.cli.exits import UsageError

KEYS = {"registry-files": "shell patterns of registry modules, relative to pyproject.toml"}
"""The keys ``[tool.titan]`` may hold, with what each means."""


class Declaration:
    """What the nearest ``pyproject.toml`` declares (nothing when there is none)."""

    __slots__ = ("root", "registry_files", "file")

    def __init__(self, root: str, registry_files: tuple[str, ...], file: str | None) -> None:
        self.root = root
        self.registry_files = registry_files
        self.file = file


_found: dict[str, Declaration] = {}


def declaration(start: str | None = None) -> Declaration:
    """The declaration that applies in ``start`` (the working folder by default)."""
    start = os.path.abspath(start or os.getcwd())
    if start not in _found:
        _found[start] = _read(start)
    return _found[start]


def declared_registry(path: str) -> bool:
    """Whether the ``.py`` file ``path`` matches a declared ``registry-files`` pattern."""
    found = declaration()
    if not found.registry_files:
        return False
    relative = os.path.relpath(os.path.abspath(path), found.root).replace(os.sep, "/")
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in found.registry_files)


def _read(start: str) -> Declaration:
    folder = start
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(candidate):
            return _parse(candidate, root=folder)
        parent = os.path.dirname(folder)
        if parent == folder or os.path.exists(os.path.join(folder, ".git")):
            return Declaration(start, (), None)
        folder = parent


def _parse(file: str, *, root: str) -> Declaration:
    try:
        with open(file, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise UsageError(f"cannot read {file}: {error.strerror or error}") from None
    if b"tool.titan" not in raw and b'"titan"' not in raw:
        return Declaration(root, (), file)  # no declaration: not worth parsing
    import tomllib

    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{file}: cannot read the [tool.titan] declaration: {error}") from None
    table = document.get("tool", {}).get("titan", {}) if isinstance(document, dict) else {}
    if not isinstance(table, dict):
        raise UsageError(f"{file}: tool.titan must be a table")
    for key in table:
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key, list(KEYS), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f"; known: {', '.join(KEYS)}"
            raise UsageError(f"{file}: [tool.titan] has no setting `{key}`{hint}")
    patterns = table.get("registry-files", [])
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise UsageError(
            f"{file}: [tool.titan] registry-files must be a list of file patterns, such as "
            '["configs/*.py"]'
        )
    return Declaration(root, tuple(p.removeprefix("./") for p in patterns), file)
