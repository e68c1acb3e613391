"""The refusals that depend on a run's output folders, checked without writing anything: folders
that cannot be created, the names the run writes that are not files, and what the checkpoint
folder holds to resume from (a ``step-N`` that is not a checkpoint folder, a checkpoint folder that
is a file, a ``checkpoint.load_step`` it does not hold, an initial load path that is missing).

Rank 0 of a run calls them (``titan.training.setup``), after the checks every rank makes
(``titan.training.run_checks``); ``titan-train --preflight`` calls them too, and probes the dump
folder's lock without taking it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class UnusableFolder(ValueError):
    """An output folder the run could not write into (a file, or not writable)."""


def check_folders(config: Any, *, sd_adapter: Any, probe_locks: bool) -> None:
    """The refusals that depend on the output folders' state, without writing: folders that
    cannot be created, run files that are not files, the checkpoint folder's content.

    ``probe_locks``: also refuse a folder another run holds (pre-flight; the run takes the lock
    itself, between the folder check and the run files' check, where the probe stands).
    """
    from titan.components.checkpoint import check_folder
    from titan.training.dump_lock import check_run_files, probe_lock

    for folder in check_creatable_folders(config):
        if probe_locks:
            probe_lock(folder)
    check_run_files(config)
    check_folder(config.checkpoint, dump_folder=config.dump_folder, sd_adapter=sd_adapter)


def check_creatable_folders(config: Any) -> list[str]:
    """:func:`check_creatable` for each output folder (the dump folder, an absolute checkpoint
    folder); returns them as the lock names them."""
    from titan.training.dump_lock import output_folders

    folders = list(dict.fromkeys(os.path.realpath(f) for f in output_folders(config)))
    for folder in folders:
        check_creatable(folder)
    return folders


def check_creatable(folder: str) -> None:
    """Raise :class:`UnusableFolder` when the run could not write into ``folder``: it, or a
    folder above it, is a file, or the folder (or the nearest existing one above it, where it
    is still to be made) cannot be written."""
    from titan.components.run_files import DUMP_FOLDER_FLAGS, what_is

    path = Path(folder)
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    choose = f"choose another dump folder ({DUMP_FOLDER_FLAGS})"
    if not os.path.isdir(path):
        kind = what_is(str(path)) or "a file"
        if path == Path(folder):
            raise UnusableFolder(
                f"the output folder {folder} is {kind}, not a folder; move it away, or {choose}"
            )
        raise UnusableFolder(
            f"the output folder {folder} cannot be created: {path} is {kind}, not a folder; "
            + choose
        )
    if not os.access(path, os.W_OK | os.X_OK):
        what = "is" if path == Path(folder) else f"cannot be created: {path} is"
        raise UnusableFolder(f"the output folder {folder} {what} not writable; {choose}")
