"""The findings of a registry module, kept between runs so an unchanged file costs a file read.

An entry is keyed by everything the findings depend on that titan can see: the module's bytes and
path, the working folder (findings name files relative to it), the options that change the checks
(``--ngpu``, ``--select``), the Python version and titan itself (its version and the size and
modification time of each of its source files, so an edited checkout never reuses old answers).
An entry also lists every other file the module imported from outside titan and the Python
installation (a neighbour ``common.py``) with that file's hash; it is used only while they are all
unchanged.

What titan cannot see is not keyed: a registry function that reads an environment variable or a
file at call time gives cached answers until the module changes; ``--no-cache`` checks afresh.

The cache lives in the user's cache folder (``$TITAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/titan``,
``~/Library/Caches/titan`` on macOS, ``%LOCALAPPDATA%\\titan\\Cache`` on Windows,
``~/.cache/titan`` elsewhere), never in the repository. A cache that cannot be read or written is
no cache: the module is checked and nothing is reported about it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

FORMAT = 1
"""Bumped when an entry's layout changes."""
MAX_AGE_S = 30 * 24 * 3600
"""Entries not used for this long are removed when a new one is written."""


def folder() -> str:
    """Where entries live (see the module docstring)."""
    chosen = os.environ.get("TITAN_CACHE_DIR")
    if chosen:
        return os.path.join(chosen, "validate-registry")
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    elif os.name == "nt":
        base = os.path.join(os.environ.get("LOCALAPPDATA") or os.path.expanduser("~"), "titan")
        return os.path.join(base, "Cache", "validate-registry")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "titan", "validate-registry")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key(*, path: str, shown: str, content: bytes, options: dict) -> str:
    """The entry name for one module checked with ``options``."""
    from titan import __version__

    parts = {
        "format": FORMAT,
        "file": os.path.abspath(path),
        "shown": shown,
        "cwd": os.getcwd(),
        "content": digest(content),
        "options": options,
        "python": sys.version,
        "titan": __version__,
        "sources": _titan_fingerprint(),
    }
    return digest(json.dumps(parts, sort_keys=True).encode())


_fingerprint: str | None = None


def _titan_fingerprint() -> str:
    """Size and modification time of every source file of titan's three packages."""
    global _fingerprint
    if _fingerprint is None:
        import titan.migrate
        import titan.schemas

        stamps = []
        # titan.schemas and titan.migrate live in folders of their own (pyproject's package-dir)
        roots = [titan.schemas.__path__[0], titan.migrate.__path__[0], os.path.dirname(__file__)]
        roots[2] = os.path.dirname(roots[2])  # titan/ (this file is titan/cli/registry_cache.py)
        for root in roots:
            for folder_, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        try:
                            info = os.stat(os.path.join(folder_, name))
                        except OSError:
                            continue
                        stamps.append(f"{folder_}/{name}:{info.st_size}:{info.st_mtime_ns}")
        _fingerprint = digest("\n".join(stamps).encode())
    return _fingerprint


def load(name: str) -> dict | None:
    """The entry ``name`` while every file it depends on is unchanged, else ``None``."""
    entry_path = os.path.join(folder(), name + ".json")
    try:
        with open(entry_path, encoding="utf-8") as handle:
            entry = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    for dep, expected in entry.get("deps", ()):
        try:
            with open(dep, "rb") as handle:
                if digest(handle.read()) != expected:
                    return None
        except OSError:
            return None
    try:
        os.utime(entry_path)  # used: keep it from being pruned
    except OSError:
        pass
    return entry


def store(name: str, entry: dict, *, deps: list[str]) -> None:
    """Write an entry (atomically); ``deps`` are the other files the findings depend on."""
    hashed = []
    for dep in sorted(set(deps)):
        try:
            with open(dep, "rb") as handle:
                hashed.append([dep, digest(handle.read())])
        except OSError:
            return  # a dependency that cannot be read now cannot be checked later either
    where = folder()
    try:
        os.makedirs(where, exist_ok=True)
        _prune(where)
        temporary = os.path.join(where, f".{name}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({**entry, "format": FORMAT, "deps": hashed}, handle)
        os.replace(temporary, os.path.join(where, name + ".json"))
    except OSError:
        return


def _prune(where: str) -> None:
    cutoff = time.time() - MAX_AGE_S
    try:
        with os.scandir(where) as entries:
            for entry in entries:
                try:
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                except OSError:
                    continue
    except OSError:
        return
