"""Small files titan reads from folders it did not write (``hf_assets_path``'s tokenizer and
JSON files, a checkpoint's index, an RL snapshot's files), looked at before they are opened.

Opening a named pipe (FIFO) for reading blocks until something writes to it, so a FIFO where a
file was expected would hang a run; a folder, a socket or a device where a file was expected
would end it with a traceback. :func:`kind` says what a path is without opening it, and
:func:`read_json` reads a JSON file only when it is a regular file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

FILE = "file"
MISSING = "missing"

_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class AssetFileError(ValueError):
    """A file titan reads is something else, or cannot be read or parsed."""


def kind(path: str | os.PathLike, *, follow_symlinks: bool = True) -> str:
    """What ``path`` is, without opening it: :data:`FILE`, :data:`MISSING` (for a symlink that
    is followed, also one to nothing), or a description (``a named pipe (FIFO)``, ``a folder``,
    ``a symlink`` when links are not followed, ``unreadable (Permission denied)``)."""
    try:
        mode = os.stat(path, follow_symlinks=follow_symlinks).st_mode
    except FileNotFoundError:
        return MISSING
    except OSError as error:
        return f"unreadable ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return FILE
    return next((word for test, word in _KINDS if test(mode)), "a special file")


def read_json(path: str | os.PathLike, *, what: str) -> Any | None:
    """The JSON value of the file ``path`` (``what`` it is, for messages); None when there is no
    such file; :class:`AssetFileError` when it is not a regular file or not valid UTF-8 JSON."""
    found = kind(path)
    if found == MISSING:
        return None
    if found != FILE:
        raise AssetFileError(f"{path} ({what}) is {found}, not a file; replace it with the file")
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise AssetFileError(f"{path} ({what}) is not valid JSON: {error}") from None
    except OSError as error:
        raise AssetFileError(f"cannot read {path} ({what}): {error.strerror or error}") from None
