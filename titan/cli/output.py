"""Writing a command's output file: never over an input, atomic, through links, into devices.

``titan-validate -o``, ``--export-json-schema`` and ``titan-migrate -o`` write through
:func:`write_text`, after :func:`refuse_inputs` has checked (before any work) that no output is
one of the inputs (titan-train's saved config too, which it writes into its dump folder through
``titan.components.run_files``, never through a link):

- same file: two names are the same file when they resolve to the same path or share an inode,
  so ``./x``, ``../dir/x``, a symlink and a hard link to an input are all refused;
- regular file: written to a temporary file beside it (same folder, so same file system),
  flushed to disk, then renamed over it. A crash, a full disk or Ctrl-C leaves the old file as it
  was and no temporary file behind. The old file's permissions (and owner, where allowed) carry
  over, so a report kept ``0600`` stays private;
- symlink: the file it points to is replaced; the link stays a link;
- character device or FIFO (``/dev/null``, ``/dev/stdout``, a named pipe): written in place, as
  a shell redirection would; renaming over ``/dev/null`` would replace the device.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping

from titan.cli.exits import OutputError, UsageError


def refuse_inputs(
    outputs: Mapping[str, str | os.PathLike[str] | None],
    *,
    inputs: Iterable[str | os.PathLike[str]],
    makes_folders: bool = False,
) -> None:
    """Raise :class:`UsageError` if an output (by its flag) would overwrite an input or another
    output, is a folder, or lies in a folder that does not exist (unless the command
    ``makes_folders``, as titan-train makes its dump folder). ``outputs`` maps each flag to its
    file; None means not given."""
    named = [(flag, os.fspath(path)) for flag, path in outputs.items() if path is not None]
    sources = [(os.fspath(path), _identity(path)) for path in inputs]
    for index, (flag, path) in enumerate(named):
        if os.path.isdir(path):
            raise UsageError(f"cannot write {flag} {path}: it is a folder; name a file")
        folder = os.path.dirname(_identity(path)[0])
        if not makes_folders and not os.path.isdir(folder):
            raise UsageError(f"cannot write {flag} {path}: the folder {folder} does not exist")
        target = _identity(path)
        for source, identity in sources:
            if _same(target, identity):
                raise UsageError(
                    f"{flag} {path} is the input {source}; refusing to write over it "
                    "(name another file; nothing was written)"
                )
        for other_flag, other in named[index + 1 :]:
            if _same(target, _identity(other)):
                raise UsageError(f"{flag} and {other_flag} name the same file {path}")


def _identity(path: str | os.PathLike[str]) -> tuple[str, tuple[int, int] | None]:
    """A file's resolved path, and its device and inode when it exists."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        inode = None
    else:
        inode = (info.st_dev, info.st_ino)
    try:
        return os.path.realpath(path), inode
    except ValueError:  # a NUL character: no file has that name
        return os.fspath(path), inode


def _same(first: tuple, second: tuple) -> bool:
    """Two names are one file: the same resolved path, or the same device and inode (so
    ``./x``, ``../dir/x``, a symlink and a hard link all are the file ``x``)."""
    return first[0] == second[0] or (first[1] is not None and first[1] == second[1])


def write_text(target: str | os.PathLike[str], *, text: str) -> None:
    """Write ``text`` (UTF-8) to the file ``target`` names, as the module docstring describes.

    Raises :class:`UsageError` for a folder and :class:`OutputError` when writing fails.
    """
    path = os.fspath(target)
    data = text.encode("utf-8")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None  # a new file, or a link to one that does not exist yet
    except (OSError, ValueError) as error:
        raise OutputError(f"cannot write {path}: {_reason(error)}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{path} is a folder; name a file to write")
    try:
        if info is not None and not stat.S_ISREG(info.st_mode):
            _write_in_place(path, data=data)
        else:
            _replace(os.path.realpath(path), data=data, old=info)
    except OSError as error:
        raise OutputError(f"cannot write {path}: {_reason(error)}") from None


def _write_in_place(path: str, *, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        _write_all(fd, data=data)
    finally:
        os.close(fd)


def _replace(path: str, *, data: bytes, old: os.stat_result | None) -> None:
    """Write beside ``path`` and rename over it; on any failure remove the temporary file."""
    folder, name = os.path.split(path)
    folder = folder or os.curdir
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, f"the folder {folder} does not exist")
    temporary = os.path.join(folder, f".{name[:200]}.{os.urandom(4).hex()}.tmp")
    # 0o666 and the umask, as a plain open() would create the file.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags, 0o666)
    try:
        try:
            if old is not None:
                _keep_permissions(fd, old=old)
            _write_all(fd, data=data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:  # a failed write, Ctrl-C or SIGTERM: the old file stays as it was
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _sync_folder(folder)


def _keep_permissions(fd: int, *, old: os.stat_result) -> None:
    os.fchmod(fd, stat.S_IMODE(old.st_mode))
    if hasattr(os, "fchown") and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:
            pass  # only root may give a file away; the mode is what keeps it private


def _write_all(fd: int, *, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_folder(folder: str) -> None:
    """Make the rename itself durable (best effort: not every system can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error)
