"""The findings of a registry module, kept between runs so an unchanged file costs a file read.

An entry is keyed by everything the findings depend on that titan can see: the module's bytes and
path, the working folder (findings name files relative to it), the options that change the checks
(``--ngpu``, ``--select``), the Python version, installation and import path, the distributions
installed in site-packages (names and versions), and titan itself (its version and the size and
modification time of each of its source files, so an edited checkout never reuses old answers).
An entry also lists every other file the module imported from outside titan, the standard library
and the normally installed distributions, with that file's size and hash: a neighbour
``common.py``, the user's own package installed with ``pip install -e`` (see
``titan.cli.cache_files``). It is used only while they are all unchanged. No entry is written
when one of those files was modified during the check (or less than a second before it began):
its hash might not be of the version that ran.

What titan cannot see is not keyed: a registry function that reads an environment variable or a
file at call time gives cached answers until the module changes; ``--no-cache`` checks afresh.

The cache lives in the user's cache folder (``$TITAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/titan``,
``~/Library/Caches/titan`` on macOS, ``%LOCALAPPDATA%\\titan\\Cache`` on Windows,
``~/.cache/titan`` elsewhere), in a folder ``validate-registry`` that titan makes for the current
user alone, never in the repository::

    validate-registry/
        <key>.json              one entry: its key, findings, registry names, dependencies
        .<key>.<random>.tmp     an entry being written; renamed over <key>.json when complete

A cache that cannot be used is no cache: the module is checked and nothing is reported about it.
That covers an entry that is not one titan wrote whole (cut short, of another shape or key, not
UTF-8, larger than any entry, a FIFO, a device, a folder, a link) and a ``validate-registry``
folder that is a file, a link, another user's, unwritable or on a full disk. A bad entry is
replaced by the fresh result; nothing else in the folder is written through, and nothing outside
it is touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time

from titan.cli import cache_files

FORMAT = 2
"""Bumped when an entry's layout changes."""
MAX_AGE_S = 30 * 24 * 3600
"""Entries not used for this long are removed when a new one is written."""
MAX_ENTRY_BYTES = 4 * 1024 * 1024
"""An entry larger than this is not written, and a file larger than this is not read."""
RACY_NS = 1_000_000_000
"""A dependency modified after its check began, or this little before (file times are as coarse
as a second on some file systems), may have changed while it was read: such a check's findings
are not kept."""
_began: dict[str, tuple[int, str]] = {}
"""For each key made in this process: when, and for which module file."""


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
    """The hex SHA-256 of ``data``."""
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
        # another environment may resolve the module's imports to other files
        "prefix": sys.prefix,
        "sys_path": sys.path,
        "installed": cache_files.installed_fingerprint(),
        "titan": __version__,
        "sources": _titan_fingerprint(),
    }
    name = digest(json.dumps(parts, sort_keys=True).encode())
    _began[name] = (time.time_ns(), os.path.abspath(path))
    return name


_fingerprint: str | None = None


def _titan_fingerprint() -> str:
    """Size and modification time of every source file of titan's three packages."""
    global _fingerprint
    if _fingerprint is None:
        stamps = []
        for root in cache_files.titan_folders():
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
    """The entry ``name`` while it is whole and every file it depends on is unchanged, else
    ``None`` (never an error: see the module docstring). A returned entry has ``diagnostics``
    (dicts of ``code``, ``severity``, ``path``, ``message``, ``hint`` and ``span``, a list
    ``[file, line, col, end_line, end_col]`` or ``None``) and ``declared`` (names)."""
    where = _open_folder(create=False)
    if where is None:
        return None
    try:
        raw = cache_files.read_regular(
            name + ".json", limit=MAX_ENTRY_BYTES, dir_fd=where, follow=False
        )
        entry = _parse(raw, name) if raw is not None else None
        if entry is None or not all(cache_files.stamp(d[0]) == d[1:] for d in entry["deps"]):
            return None
        try:  # used: keep it from being pruned
            os.utime(name + ".json", dir_fd=where, follow_symlinks=False)
        except (OSError, NotImplementedError):
            pass
        return entry
    finally:
        os.close(where)


def store(name: str, entry: dict, *, deps: list[str]) -> None:
    """Write an entry atomically; ``deps`` are the files the module imported (those that are
    dependencies, see ``titan.cli.cache_files``, are recorded with their size and hash). Nothing
    is written when a dependency was modified while the check that began at :func:`key` ran
    (``RACY_NS``)."""
    began, own = _began.pop(name, (None, None))
    recorded = []
    for dep in sorted({os.path.abspath(d) for d in deps if cache_files.is_dependency(d)}):
        now = cache_files.stamp(dep)
        if now is None:
            return  # a dependency that cannot be read now cannot be checked later either
        # the module's own file needs no such check: its bytes read before the check are keyed
        if began is not None and dep != own and _modified_ns(dep) >= began - RACY_NS:
            return  # it may have changed while the check read it: its hash says nothing
        recorded.append([dep, *now])
    try:
        data = json.dumps({**entry, "format": FORMAT, "key": name, "deps": recorded}).encode()
    except (TypeError, ValueError):
        return
    if len(data) > MAX_ENTRY_BYTES or _parse(data, name) is None:
        return  # it could not be read back
    where = _open_folder(create=True)
    if where is None:
        return
    try:
        _prune(where)
        _publish(where, name + ".json", data)
    finally:
        os.close(where)


def _modified_ns(path: str) -> int:
    """When ``path`` was last modified (the far future when that cannot be told)."""
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, ValueError):
        return sys.maxsize


def _parse(raw: bytes, name: str) -> dict | None:
    """The entry in ``raw`` when it is one titan wrote for ``name``, else ``None``."""
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        return None
    if entry["format"] != FORMAT or entry["key"] != name:
        return None
    if not (_list_of(entry["declared"], _text) and _list_of(entry["deps"], _dependency)):
        return None
    return entry if _list_of(entry["diagnostics"], _diagnostic) else None


def _text(value: object) -> bool:
    """A string."""
    return type(value) is str


def _optional_text(value: object) -> bool:
    """A string or null."""
    return value is None or type(value) is str


def _position(value: object) -> bool:
    """A 1-based line or column."""
    return type(value) is int and value >= 1  # not a bool, which is an int too


def _optional_position(value: object) -> bool:
    """A 1-based line or column, or null."""
    return value is None or _position(value)


def _list_of(value: object, check) -> bool:
    """A list whose every item passes ``check``."""
    return type(value) is list and all(check(item) for item in value)


def _severity(value: object) -> bool:
    """One of the severities' names."""
    from titan.schemas.diagnostics import Severity

    return type(value) is str and value in {s.value for s in Severity}


def _span(value: object) -> bool:
    """Null or ``[file, line, col, end_line, end_col]``."""
    checks = (_text, _position, _position, _optional_position, _optional_position)
    return value is None or (
        type(value) is list
        and len(value) == len(checks)
        and all(check(item) for check, item in zip(checks, value, strict=True))
    )


def _dependency(value: object) -> bool:
    """``[absolute path, size, sha256]``."""
    return (
        type(value) is list
        and len(value) == 3
        and _text(value[0])
        and os.path.isabs(value[0])
        and type(value[1]) is int
        and value[1] >= 0
        and _text(value[2])
        and len(value[2]) == 64
    )


_DIAGNOSTIC_FIELDS = {
    "code": _text,
    "severity": _severity,
    "path": _text,
    "message": _text,
    "hint": _optional_text,
    "span": _span,
}
_ENTRY_KEYS = {"format", "key", "declared", "diagnostics", "deps"}


def _diagnostic(value: object) -> bool:
    """A finding as ``to_dict`` writes it: exactly its fields, each of its type."""
    return (
        type(value) is dict
        and set(value) == set(_DIAGNOSTIC_FIELDS)
        and all(check(value[field]) for field, check in _DIAGNOSTIC_FIELDS.items())
    )


def _open_folder(*, create: bool) -> int | None:
    """A descriptor on the entries' folder, or ``None`` when there is no usable one: missing (and
    not ``create``), not a folder, a link, or another user's."""
    path = folder()
    if create:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path, 0o700)  # the current user's alone
        except FileExistsError:
            pass
        except (OSError, ValueError):
            return None
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        usable = stat.S_ISDIR(info.st_mode) and (
            not hasattr(os, "geteuid") or info.st_uid == os.geteuid()
        )
    except OSError:
        usable = False
    if not usable:
        os.close(fd)
        return None
    return fd


def _publish(where: int, name: str, data: bytes) -> None:
    """Write ``data`` as ``name`` in the folder ``where`` whole or not at all: into a new
    temporary file (never one that exists: a link planted there is not written through), then
    renamed over ``name``."""
    temporary = f".{name[: -len('.json')]}.{os.urandom(8).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600, dir_fd=where)
    except (OSError, NotImplementedError):
        return
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        try:
            os.replace(temporary, name, src_dir_fd=where, dst_dir_fd=where)
        except IsADirectoryError:
            os.rmdir(name, dir_fd=where)  # an empty folder in the way holds nobody's data
            os.replace(temporary, name, src_dir_fd=where, dst_dir_fd=where)
        temporary = ""
    except OSError:  # a full disk, a folder in the way that is not empty
        pass
    finally:
        if temporary:
            try:
                os.unlink(temporary, dir_fd=where)
            except OSError:
                pass


def _prune(where: int) -> None:
    """Remove the entries (and temporaries left by a killed run) not used for ``MAX_AGE_S``."""
    cutoff = time.time() - MAX_AGE_S
    try:
        with os.scandir(where) as entries:
            for entry in entries:
                if not (entry.name.endswith(".json") or entry.name.endswith(".tmp")):
                    continue
                try:
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.name, dir_fd=where)
                except OSError:
                    continue
    except OSError:
        return
