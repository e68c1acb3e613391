"""One run per output folder: a lock that rank 0 holds for as long as the run may write there.

Two runs in one dump folder would delete each other's in-flight checkpoint saves, resume from
each other's checkpoints and interleave their ``metrics.jsonl``. So rank 0 takes an exclusive
``fcntl.flock`` on ``<dump_folder>/titan-train.lock`` before anything is written, and a second
run is refused with the holder's pid, host and start time (written into the file).

The kernel releases a flock when its holder exits, however it exits (SIGKILL, OOM), so a lock
file left behind by a dead run is not held and the next run simply takes it. A lock is only
"stale" while some process still holds it: one the run started that outlived it, or a holder on
another host of a shared file system. Removing the file overrides it: the next run locks a new
file, which is why taking the lock checks that the file it locked is still the one at the path.

The lock file, like every file the run writes into the folder (``run_files``), is opened without
following a link or waiting on a FIFO (``titan.components.run_files``): one that is not a regular
file is refused before the run does anything, its target untouched.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import socket
import time
from typing import Any

from titan.components.metrics import METRICS_FILE
from titan.components.run_files import DUMP_FOLDER_FLAGS, check_run_file, open_run_file

log = logging.getLogger("titan")

LOCK_FILE = "titan-train.lock"
"""The lock file's name inside each folder a run writes to."""

# Errors of a file system that has no flock (some network mounts): the run goes on unlocked.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


_HELD: set[int] = set()
"""File descriptors of the locks this process holds."""


def _close_held_in_child() -> None:
    # A forked child (a data loader worker) shares the lock with its parent and would keep it
    # held after the run ended, or died; closing its copy leaves the parent's lock as it is.
    for fd in _HELD:
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


class DumpFolderInUse(ValueError):
    """Another live run holds the lock of a folder this run would write to."""


@dataclasses.dataclass(slots=True)
class FolderLock:
    """A held lock on ``folder``; ``release`` (or process exit) frees it."""

    folder: str
    path: str
    fd: int | None

    @classmethod
    def acquire(cls, folder: str) -> FolderLock:
        """Lock ``folder`` (created if missing) or raise ``DumpFolderInUse`` naming the holder."""
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, LOCK_FILE)
        while True:
            fd = open_run_file(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise DumpFolderInUse(_in_use(folder, path=path, holder=holder)) from None
            except OSError as error:
                os.close(fd)
                if error.errno not in _NO_LOCKS:
                    raise
                log.warning(
                    "%s cannot be locked (%s): a second run in this folder would not be "
                    "refused; give every run its own folder",
                    folder,
                    error.strerror,
                )
                return cls(folder=folder, path=path, fd=None)
            # Between open and flock the holder may have released (and removed) the file, or a
            # user removed it to override the lock: a lock on an unlinked file guards nothing.
            if _same_file(fd, path):
                break
            os.close(fd)
        try:
            _write_holder(fd)
        except OSError as error:  # a full disk: the message names the lock file
            os.close(fd)
            raise OSError(error.errno, error.strerror, path) from None
        _HELD.add(fd)
        return cls(folder=folder, path=path, fd=fd)

    def release(self) -> None:
        """Remove the lock file (when it is still this lock's) and unlock; safe to call twice."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        _HELD.discard(fd)
        try:
            if _same_file(fd, self.path):
                os.unlink(self.path)
        except OSError:
            pass  # the folder went away or became read-only: closing still unlocks
        finally:
            os.close(fd)


def lock_folders(folders: list[str]) -> list[FolderLock]:
    """Lock every folder of ``folders`` (skipping repeats), releasing all of them on failure."""
    held: list[FolderLock] = []
    try:
        for folder in dict.fromkeys(os.path.realpath(f) for f in folders):
            held.append(FolderLock.acquire(folder))
    except BaseException:
        release_all(held)
        raise
    return held


def probe_lock(folder: str) -> None:
    """Raise ``DumpFolderInUse``, as taking the lock would, when a live run holds ``folder``'s
    lock; creates nothing. The probe holds a shared lock for the moment of the test."""
    path = os.path.join(folder, LOCK_FILE)
    if not os.path.lexists(path):
        return
    fd = open_run_file(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise DumpFolderInUse(_in_use(folder, path=path, holder=_read_holder(fd))) from None
    except OSError as error:
        if error.errno not in _NO_LOCKS:
            raise
    finally:
        os.close(fd)  # closing releases the shared lock


def release_all(locks: list[FolderLock]) -> None:
    for lock in reversed(locks):
        lock.release()


def output_folders(config: Any) -> list[str]:
    """The folders a run writes to: the dump folder, and the checkpoint folder when it lies
    elsewhere (an absolute ``checkpoint.folder``)."""
    folders = [config.dump_folder]
    checkpoint = config.checkpoint
    if checkpoint.enable and not checkpoint.load_only:
        root = os.path.realpath(os.path.join(config.dump_folder, checkpoint.folder))
        if not root.startswith(os.path.realpath(config.dump_folder) + os.sep):
            folders.append(root)
    return folders


def saved_config_file(config: Any) -> str | None:
    """Where ``debug.save_config_file`` is written (relative to the dump folder), if it is set."""
    name = config.debug.save_config_file
    return os.path.join(config.dump_folder, name) if name else None


def run_files(config: Any) -> list[str]:
    """The files rank 0 creates or appends to in the dump folder besides the lock, whose names
    the user could have taken: ``metrics.jsonl`` and ``debug.save_config_file``."""
    saved = saved_config_file(config)
    return [os.path.join(config.dump_folder, METRICS_FILE), *([saved] if saved else [])]


def check_run_files(config: Any) -> None:
    """Refuse (``UnsafeRunFile``) a run whose files are links, FIFOs or folders, before any work."""
    for path in run_files(config):
        check_run_file(path)


EVERY_RANK_STOPS = "titan_every_rank_stops"
"""The attribute set (True) on a refusal every rank of the job raises at the same point: each
rank then waits, before its process ends, until the others have said why they stopped (torchrun
ends the remaining ranks as soon as one exits, which could cut a rank's message short)."""


def agree_on_locks(refusal: BaseException | None) -> None:
    """Raise on every rank when rank 0 could not lock the output folders (``refusal``)."""
    import torch.distributed as dist

    from titan.training.errors import describe

    if dist.is_available() and dist.is_initialized() and dist.get_backend() != "fake":
        verdict = [None if refusal is None else describe(refusal)]
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0] is not None:
            from titan.distributed.process_group import destroy_distributed

            # Every rank knows the verdict and stops here: none may close its connections while
            # the broadcast is still arriving at another (gloo aborts that process at exit).
            destroy_distributed(wait_for_peers=True)
            if refusal is None:
                refusal = DumpFolderInUse(f"rank 0 refused the run: {verdict[0]}")
            setattr(refusal, EVERY_RANK_STOPS, True)
    if refusal is not None:
        raise refusal


def _same_file(fd: int, path: str) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)


def _read_holder(fd: int) -> dict[str, object]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _in_use(folder: str, *, path: str, holder: dict[str, object]) -> str:
    pid, host = holder.get("pid", "?"), holder.get("host", "an unknown host")
    started = f", started {holder['started']}" if holder.get("started") else ""
    if host == socket.gethostname() and isinstance(pid, int) and not _alive(pid):
        gone = (
            f"pid {pid} has exited, but a process it started still holds the lock (the kernel "
            "releases it when the last one exits): stop that process"
        )
    else:
        gone = (
            f"the lock is released when pid {pid} exits, even when it is killed, so a lock file "
            "left by a dead run is not held; if that run is over and this persists, a process "
            "it started still holds the lock: stop it"
        )
    return (
        f"{folder} is in use by another titan-train run: pid {pid} on {host}{started} "
        f"(lock file {path}). Two runs in one folder overwrite each other's checkpoints and "
        "metrics, so this run wrote nothing. Wait for that run to end, or give this one its own "
        f"folder ({DUMP_FOLDER_FLAGS}). {gone[0].upper()}{gone[1:]}, "
        f"or remove {path} to run anyway (only when no run writes to {folder} any more)."
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
