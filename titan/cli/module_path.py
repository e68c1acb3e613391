"""``--module-path DIR``: where every command finds the user's modules that are not installed.

A fork keeps its custom config module, its model registries and its converters in its own
folders. A TOML's custom config module is read from source and searched in the TOML's folder,
then in these folders (``titan.schemas.merged_extensions``); a module that is imported (a registry file, a
model registry a migrated config calls, a registry ``--config`` function) is found through
``sys.path``, where these folders come first. Each command takes the flag the same way
(repeatable, ``--module-path DIR`` or ``--module-path=DIR``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence

FLAG = "--module-path"
HELP = (
    "folder to search for custom config modules, model registries and other modules the "
    "config imports, before the working folder and Python's path (repeatable)"
)


def split(argv: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """The ``--module-path`` folders taken out of ``argv``, and the rest in order; a flag with
    no folder after it is a :class:`~titan.cli.exits.UsageError`."""
    from titan.cli.exits import UsageError

    folders: list[str] = []
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag != FLAG:
            rest.append(args[i])
        elif eq:
            folders.append(value)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            folders.append(args[i + 1])
            i += 1
        else:
            raise UsageError(f"{FLAG} requires a folder: write `{FLAG} DIR`")
        i += 1
    return tuple(folders), rest


def first_on_path(folders: Sequence[str]) -> None:
    """Put ``folders`` first on ``sys.path`` for the rest of the process (titan-train, whose
    model is built long after its config, imports the user's modules until it ends)."""
    added = [os.path.abspath(folder) for folder in folders]
    sys.path[:0] = [folder for folder in added if folder not in sys.path[: len(added)]]
    importlib.invalidate_caches()  # folders or files made since the last import must be seen


@contextlib.contextmanager
def importable(folders: Sequence[str]) -> Iterator[None]:
    """``folders`` first on ``sys.path`` while the block runs, then ``sys.path`` as it was."""
    if not folders:
        yield
        return
    saved = list(sys.path)
    first_on_path(folders)
    try:
        yield
    finally:
        sys.path[:] = saved
