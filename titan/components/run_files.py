"""The files a run writes into its folders: never through a link, never blocking, and a full disk
said in words.

A dump folder belongs to the user, so a name titan-train writes there (``titan-train.lock``,
``metrics.jsonl``, the saved config, a crash's traceback, a Hugging Face export's
``config.json``) may already be something other than a file titan wrote:

- a symlink: opening it would truncate or append to whatever it points at (a file outside the
  folder, another run's metrics). ``O_NOFOLLOW`` makes the check part of the open itself, so a
  link made between a check and the open is refused too; link and target stay untouched;
- a FIFO: opening it for writing waits for a reader that may never come. ``O_NONBLOCK`` makes
  the open return (or fail with ``ENXIO``) at once; it is cleared again on a regular file;
- a folder, a device or a socket.

Each is refused with :class:`UnsafeRunFile`, naming the path, what it is and what to do. An atomic
write (a temporary file renamed over the name) never follows a link either: ``rename`` replaces
a link itself, never its target.

A full disk shows itself as ``OSError`` ``ENOSPC`` or, inside ``torch.save``, as torch's
``[enforce fail at inline_container.cc]`` with no errno; :func:`space_problem` tells which it is
from the error and the free space left where the file was written.

Torch-free: ``titan.training.errors`` uses it to word a failed run.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

DUMP_FOLDER_FLAGS = "--dump_folder, or --job.dump_folder for a TOML"
"""The flags that choose a run's dump folder, in both config forms."""

# What a name is when it is not a regular file, by its file type (lstat's st_mode).
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}

# Errors of ``os.open`` that may mean the name is not a plain file: ELOOP (a link, with
# O_NOFOLLOW), EISDIR (a folder opened for writing), ENXIO (a FIFO with no reader, with
# O_NONBLOCK), EEXIST (anything at all, with O_EXCL).
_NOT_A_FILE = {errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EEXIST}

NO_ROOM = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
}
"""The errnos that mean a write found no room, and how a message says so."""

# How torch's and safetensors' writers word a short write: torch.save's zip writer reports the
# stream position it expected ("unexpected pos") or a failed write, without an errno.
TORCH_WRITER_MARKS = ("inline_container.cc", "PytorchStreamWriter failed")
_ERRNO_28_MARKS = ("os error 28", "No space left on device")
FULL_BELOW_BYTES = 1024**2
"""Less free space than this after a failed write means the write failed for want of room."""


class UnsafeRunFile(ValueError):
    """A name a run writes to is a link, a FIFO, a folder or a device, not a regular file."""


def what_is(path: str) -> str | None:
    """What ``path`` is when it is neither missing nor a regular file ("a symlink to X", "a
    folder"), else None; links are described, never followed."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(info.st_mode):
        return None
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path)
        dangling = "" if os.path.exists(path) else ", which does not exist"
        return f"a symlink to {target}{dangling}"
    return _KINDS.get(stat.S_IFMT(info.st_mode), "a special file")


def refusal(path: str, kind: str) -> UnsafeRunFile:
    """The error for ``path``, which is ``kind`` (see :func:`what_is`)."""
    return UnsafeRunFile(
        f"{path} is {kind}, not a file titan-train wrote; titan-train writes its own files there "
        "and never through a link, into a FIFO or over a folder, so it left it untouched. "
        f"Delete {path}, or choose another dump folder ({DUMP_FOLDER_FLAGS})"
    )


def check_run_file(path: str) -> None:
    """Raise :class:`UnsafeRunFile` unless ``path`` is missing or a regular file."""
    kind = what_is(path)
    if kind is not None:
        raise refusal(path, kind)


def open_run_file(path: str, flags: int, *, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` that refuses anything but a regular file (see the module
    docstring) without following a link or waiting on a FIFO; returns a blocking descriptor."""
    opening = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, opening, mode)
    except OSError as error:
        kind = what_is(path) if error.errno in _NOT_A_FILE else None
        if kind is not None:
            raise refusal(path, kind) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refusal(path, _KINDS.get(stat.S_IFMT(info.st_mode), "a special file"))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_run_file(path: str, *, data: bytes) -> None:
    """Write ``data`` as the file ``path``, atomically: into a temporary file beside it, then
    renamed over it, so a crash or a full disk leaves the old file (or none) and no temporary."""
    check_run_file(path)
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name[:200]}.{os.urandom(4).hex()}.tmp")
    fd = open_run_file(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)  # replaces a link made meanwhile, never its target
    except BaseException as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if isinstance(error, OSError) and error.filename is None:  # a full disk names the file
            raise OSError(error.errno, error.strerror, path) from None
        raise


def free_bytes(folder: str) -> int | None:
    """The space left to an unprivileged writer on the file system of ``folder`` (None when it
    cannot be asked)."""
    try:
        info = os.statvfs(folder)
    except (OSError, ValueError):
        return None
    return info.f_bavail * info.f_frsize


def space_problem(error: BaseException, *, folder: str) -> str | None:
    """Why a write into ``folder`` failed, in words, when the cause is the disk's room (or may
    be); None when ``error`` is something else."""
    if isinstance(error, OSError) and error.errno in NO_ROOM:
        return f"{NO_ROOM[error.errno]} ({error.strerror or os.strerror(error.errno)})"
    text = str(error)
    if any(mark in text for mark in _ERRNO_28_MARKS):
        return f"{NO_ROOM[errno.ENOSPC]} ({os.strerror(errno.ENOSPC)})"
    if not any(mark in text for mark in TORCH_WRITER_MARKS):
        return None
    free = free_bytes(folder)
    said = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if free is not None and free < FULL_BELOW_BYTES:
        return f"{NO_ROOM[errno.ENOSPC]} ({free:,} bytes left; torch's writer said: {said})"
    left = "" if free is None else f", {free:,} bytes are left"
    return (
        f"torch could not finish writing a file ({said}){left}: the disk may be full, over "
        "its quota or failing"
    )
