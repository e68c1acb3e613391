"""Versioned weight snapshots for a generator: ``push`` publishes, ``load`` reads.

``push(state_dict, folder, version)`` writes ``folder/v<version>/`` (``model.safetensors``, the
family's ``config.json`` when given, and a ``.titan-snapshot`` marker) into a temporary folder
beside it, flushes every file and folder to disk, renames it into place, then points
``folder/latest`` at it (written to a temporary file and renamed over the old pointer). A push
killed at any point therefore leaves the previous version whole and ``latest`` naming a complete
version. Old versions beyond ``keep`` are removed afterwards; the newest complete version and
anything without titan's marker (a folder titan did not write) are never removed.

One writer per folder; any number of readers. No torch import until tensors are written or read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

from titan.components import asset_files

MARKER = ".titan-snapshot"
"""Written last into a version folder: its presence says titan wrote it and it is complete."""
PARTIAL = ".titan-partial"
"""Written first into a temporary folder: its presence says titan may remove it."""
LATEST = "latest"
"""The pointer file: ``v<version>`` of the newest complete push."""
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
VERSION_NAME = re.compile(r"^v(0|[1-9][0-9]{0,17})$")
TEMP_PREFIX = ".tmp-v"


class SnapshotError(ValueError):
    """A snapshot that cannot be written or read as asked; the message says why."""


def push(
    state_dict: Mapping[str, Any],
    folder: str | os.PathLike[str],
    version: int,
    *,
    keep: int = 2,
    config_json: Mapping[str, Any] | None = None,
) -> str:
    """Publish ``state_dict`` (name -> tensor) as ``folder/v<version>/``; returns that path.

    ``keep`` complete versions stay (the newest always); ``config_json`` becomes the
    version's ``config.json``. ``SnapshotError`` for a version that exists, a bad version or
    ``keep``, a ``folder`` that is a file, or a ``latest`` that titan did not write.
    """
    _check_version(version)
    root = _root(folder)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise SnapshotError(f"keep must be an int >= 1, not {keep!r}")
    if not isinstance(state_dict, Mapping) or not state_dict:
        raise SnapshotError("the state dict to push must be a non-empty mapping of tensors")
    _check_config_json(config_json)
    if os.path.exists(root) and not os.path.isdir(root):
        raise SnapshotError(f"{root} is not a folder")
    os.makedirs(root, exist_ok=True)
    _pointer(root)  # refuse before writing when `latest` is not titan's
    final = os.path.join(root, f"v{version}")
    if os.path.lexists(final):
        raise SnapshotError(f"{final} exists already; each push needs a new version")
    _remove_stale_temps(root)
    temp = os.path.join(root, f"{TEMP_PREFIX}{version}-{os.getpid()}")
    os.mkdir(temp)
    try:
        _write_text(os.path.join(temp, PARTIAL), json.dumps({"pid": os.getpid()}))
        _write_files(temp, state_dict, config_json)
        _write_text(os.path.join(temp, MARKER), json.dumps({"version": version}))
        _fsync_dir(temp)
        os.rename(temp, final)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    os.remove(os.path.join(final, PARTIAL))
    _fsync_dir(final)
    _fsync_dir(root)
    _point(root, version)
    _prune(root, keep=keep, newest=version)
    return final


class Snapshot(dict):
    """The tensors of one snapshot (name -> tensor, on the CPU), with the ``version`` they are
    and the ``path`` of their folder."""

    version: int
    path: str

    def __init__(self, tensors: Mapping[str, Any], *, version: int, path: str) -> None:
        super().__init__(tensors)
        self.version = version
        self.path = path


def latest_version(folder: str | os.PathLike[str]) -> int | None:
    """The newest complete version in ``folder``: the one ``latest`` names, or, when the
    pointer is missing, the highest complete version folder; None when there is none.
    ``SnapshotError`` when ``latest`` names a version that is not complete (it was damaged
    after its push: ``load(folder, newest_readable=True)`` reads an older one)."""
    root = _root(folder)
    if not os.path.isdir(root):
        return None
    pointed = _pointer(root)
    if pointed is not None:
        _check_complete(root, pointed)
        return pointed
    versions = _versions(root)
    return versions[-1] if versions else None


def load(
    folder: str | os.PathLike[str],
    version: int | None = None,
    *,
    newest_readable: bool = False,
) -> Snapshot:
    """The tensors of ``version`` (None: the one ``latest`` names, else the highest complete
    version) in ``folder``, on the CPU, as a ``Snapshot`` whose ``version`` says which.

    A version that is incomplete, damaged or not made of regular files raises
    ``SnapshotError`` naming it and the file; with ``newest_readable`` (and no ``version``)
    the newest version that reads is returned instead, older than ``latest`` if need be."""
    root = _root(folder)
    if version is not None:
        _check_version(version)
        if newest_readable:
            raise SnapshotError("load takes a version or newest_readable, not both")
        return _read(root, version)
    if not os.path.isdir(root):
        raise SnapshotError(f"{root} holds no complete weight snapshot")
    pointed = _pointer(root)
    older = [v for v in reversed(_versions(root)) if pointed is None or v < pointed]
    candidates = ([] if pointed is None else [pointed]) + older
    if not candidates:
        raise SnapshotError(f"{root} holds no complete weight snapshot")
    if not newest_readable:
        return _read(root, candidates[0])
    failures = []
    for candidate in candidates:
        try:
            return _read(root, candidate)
        except SnapshotError as error:
            failures.append(str(error))
    raise SnapshotError(f"{root}: no version reads: " + "; ".join(failures))


def _read(root: str, version: int) -> Snapshot:
    """The tensors of ``v<version>``; ``SnapshotError`` naming the file that is missing, not a
    regular file, or not readable safetensors."""
    from safetensors.torch import load_file

    _check_complete(root, version)
    path = os.path.join(root, f"v{version}", WEIGHTS)
    try:
        tensors = load_file(path)
    except Exception as error:  # safetensors' own error type, OSError, a torn header
        raise SnapshotError(
            f"{path} (version {version}) cannot be read as safetensors: {error}"
        ) from None
    return Snapshot(tensors, version=version, path=os.path.dirname(path))


def _root(folder: Any) -> str:
    """``folder`` as a path; ``SnapshotError`` for anything that is not one."""
    if not isinstance(folder, str | os.PathLike):
        raise SnapshotError(f"the snapshot folder must be a path, not {type(folder).__name__}")
    root = os.fspath(folder)
    if not isinstance(root, str) or not root:
        raise SnapshotError(f"the snapshot folder must be a non-empty path, not {root!r}")
    return root


def _check_config_json(config_json: Any) -> None:
    """``SnapshotError`` unless ``config_json`` is None or a mapping JSON can write."""
    if config_json is None:
        return
    if not isinstance(config_json, Mapping):
        raise SnapshotError(f"config_json must be a mapping, not {type(config_json).__name__}")
    try:
        json.dumps(dict(config_json))
    except (TypeError, ValueError) as error:
        raise SnapshotError(f"config_json cannot be written as JSON: {error}") from None


def _check_version(version: Any) -> None:
    """``SnapshotError`` unless ``version`` is an int from 0 to 10**18 - 1."""
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 10**18:
        raise SnapshotError(f"version must be an int from 0 to 10**18 - 1, not {version!r}")


def _check_complete(root: str, version: int) -> None:
    """``SnapshotError`` unless ``v<version>`` holds titan's marker and its weights as
    regular files (never opened here: a FIFO would block the open)."""
    folder = os.path.join(root, f"v{version}")
    if not os.path.isdir(folder) or os.path.islink(folder):
        raise SnapshotError(f"{root} holds no complete snapshot of version {version}")
    for name in (MARKER, WEIGHTS):
        path = os.path.join(folder, name)
        kind = _kind(path)
        if kind == "missing":
            raise SnapshotError(
                f"{root} holds no complete snapshot of version {version}: {path} is missing"
            )
        if kind != "file":
            raise SnapshotError(
                f"{path} (version {version}) is {kind}, not a regular file titan wrote; "
                "it is not read"
            )


def _kind(path: str) -> str:
    """What ``path`` is, without following a symlink or opening it: ``file``, ``missing``,
    or a description (a FIFO, a folder, a symlink, ...)."""
    return asset_files.kind(path, follow_symlinks=False)


def _write_files(
    temp: str, state_dict: Mapping[str, Any], config_json: Mapping[str, Any] | None
) -> None:
    """The weights (one CPU copy each: safetensors refuses shared storage) and config.json."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for name, value in state_dict.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise SnapshotError(f"state dict entry {name!r} is not a named tensor")
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
    path = os.path.join(temp, WEIGHTS)
    save_file(tensors, path, {"format": "pt"})
    _fsync_file(path)
    if config_json is not None:
        _write_text(os.path.join(temp, CONFIG), json.dumps(dict(config_json), indent=2))


def _point(root: str, version: int) -> None:
    """``latest`` names ``version``, replaced in one rename."""
    temp = os.path.join(root, f".{LATEST}.{os.getpid()}.tmp")
    if os.path.isfile(temp):  # left by a killed push of a process that had this pid
        os.remove(temp)
    _write_text(temp, f"v{version}\n")
    os.replace(temp, os.path.join(root, LATEST))
    _fsync_dir(root)


def _pointer(root: str) -> int | None:
    """The version ``latest`` names; None without one; ``SnapshotError`` for a file titan
    did not write (it is never overwritten) or one that is not a regular file (a FIFO, a
    folder, a symlink: never opened, as opening a FIFO would block)."""
    path = os.path.join(root, LATEST)
    kind = _kind(path)
    if kind == "missing":
        return None
    text = None
    if kind == "file":
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(64).strip()
        except (OSError, UnicodeDecodeError):
            text = None
    match = VERSION_NAME.match(text or "")
    if match is None:
        what = "" if kind == "file" else f" ({kind}, not a regular file)"
        raise SnapshotError(
            f"{path}{what} is not a snapshot pointer written by titan; move it away or push "
            "into another folder"
        )
    return int(match.group(1))


def _complete(root: str, version: int) -> bool:
    """Whether ``v<version>`` holds titan's marker and its weights, as regular files."""
    try:
        _check_complete(root, version)
    except SnapshotError:
        return False
    return True


def _versions(root: str) -> list[int]:
    """The complete versions in ``root``, oldest first."""
    found = []
    for name in os.listdir(root):
        match = VERSION_NAME.match(name)
        if match and _complete(root, int(match.group(1))):
            found.append(int(match.group(1)))
    return sorted(found)


def _prune(root: str, *, keep: int, newest: int) -> None:
    """Remove complete versions beyond the newest ``keep`` (never ``newest``)."""
    for version in _versions(root)[:-keep]:
        if version != newest:
            shutil.rmtree(os.path.join(root, f"v{version}"), ignore_errors=True)


def _remove_stale_temps(root: str) -> None:
    """Remove temporary folders of pushes that died (their process is gone)."""
    for name in os.listdir(root):
        partial = os.path.join(root, name, PARTIAL)
        if not name.startswith(TEMP_PREFIX) or not os.path.isfile(partial):
            continue
        try:
            with open(partial, encoding="utf-8") as handle:
                pid = int(json.load(handle)["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _alive(pid):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid: leave its folder alone
    return True


def _write_text(path: str, text: str) -> None:
    """Write ``text`` and flush it to disk."""
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_file(path: str) -> None:
    """Flush a written file to disk."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: str) -> None:
    """Flush a folder's entries (renames, new files) to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


__all__ = ["Snapshot", "SnapshotError", "latest_version", "load", "push"]
