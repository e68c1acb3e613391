"""Whether titan-migrate may replace a file that is already where a module goes.

Asked before a module is written (``-o FILE``, a folder's ``config_registry.py``), never after:

============================================  =====================  ==========================
the file there                                per-folder module      ``-o FILE``
============================================  =====================  ==========================
none yet, or an empty file                    written                written
a device or FIFO (``/dev/null``)              refused                written in place
an input, a folder                            refused                refused before any work
not titan-migrate's (no generated header)     refused                refused; ``--force``
titan-migrate's, digest intact                written                written
titan-migrate's, edited (digest off)          refused; ``--force``   refused; ``--force``
titan-migrate's, no digest (older titan)      refused; ``--force``   refused; ``--force``
read-only                                     refused; ``--force``   refused; ``--force``
============================================  =====================  ==========================

``--force`` replaces a module titan-migrate wrote even when it was edited or is read-only, and a
file of the user's that ``-o`` names, and the run says so; it never replaces an input, nor a
file titan-migrate did not write in a folder walk. The digest is ``titan.cli.module_stamp``'s.
"""

from __future__ import annotations

import os
import stat

from titan.cli import module_stamp

GENERATED_HEADER = '"""Registry functions migrated by titan-migrate'
"""How every module titan-migrate writes begins (``titan.migrate.codegen.render_code.render_module``)."""

ELSEWHERE = (
    "move it away, or write the modules elsewhere with --out-dir DIR (or one module with -o FILE)"
)
"""What to do about a file titan-migrate must never replace."""

FORCE = "pass --force to replace it (its edits are lost), or delete it"
"""What to do about a module of titan-migrate's that it will not replace unasked."""

_STATES = {
    module_stamp.EDITED: "it was edited after titan-migrate wrote it (its text no longer "
    "matches the digest on its last line)",
    module_stamp.UNSTAMPED: "it has no titan-migrate digest on its last line (an older "
    "titan-migrate wrote it, or the line was removed), so edits to it cannot be ruled out",
}
"""Why a module of titan-migrate's is kept, by what :func:`module_stamp.state` found."""

NOT_OURS = "titan-migrate did not write it (it does not begin with titan-migrate's docstring)"

FORCE_OTHER = "write the module to another file, or pass --force to replace it (its text is lost)"
"""What to do about a file of the user's that ``-o`` names: replaced only with ``--force``."""

READ_ONLY = "it is read-only"

READ_ONLY_HINT = "make it writable, or pass --force to replace it"
"""What to do about a read-only module that was not edited."""


class Verdict:
    """What may happen to the file at one output path."""

    __slots__ = ("refused", "hint", "forced")

    def __init__(
        self, *, refused: str | None = None, hint: str = ELSEWHERE, forced: str | None = None
    ) -> None:
        self.refused = refused
        """Why it may not be replaced (``None``: it may)."""
        self.hint = hint
        """What the user can do about a refusal."""
        self.forced = forced
        """What ``--force`` overrode to replace it (``None``: nothing)."""


def verdict(path: str, *, inputs: set[tuple[int, int]], force: bool, named: bool) -> Verdict:
    """May the module at ``path`` be written? ``inputs``: device and inode of every input;
    ``named``: the user named this file with ``-o`` (a file titan-migrate did not write is then
    replaced with ``--force`` only)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return Verdict()
    except (OSError, ValueError) as error:
        return Verdict(refused=f"it cannot be read ({getattr(error, 'strerror', None) or error})")
    if (info.st_dev, info.st_ino) in inputs:
        return Verdict(refused="it is one of the inputs")
    if stat.S_ISDIR(info.st_mode):
        return Verdict(refused="it is a folder")
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read below
        if named:
            return Verdict()  # /dev/null, a pipe: written in place (titan.cli.output)
        return Verdict(refused="it is not a regular file")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return Verdict(refused=f"it cannot be read ({error.strerror or error})")
    kept: list[str] = []
    if data.startswith(GENERATED_HEADER.encode()):
        found = module_stamp.state(data)
        if found != module_stamp.INTACT:
            kept.append(_STATES[found])
    elif data:
        if not named:
            return Verdict(refused=NOT_OURS)
        kept.append(NOT_OURS)
    if not stat.S_IMODE(info.st_mode) & 0o222:  # no write bit: root may write, but should not
        kept.append(READ_ONLY)
    if not kept:
        return Verdict()
    if force:
        return Verdict(forced=" and ".join(kept))
    hint = {READ_ONLY: READ_ONLY_HINT, NOT_OURS: FORCE_OTHER}.get(kept[0], FORCE)
    return Verdict(refused=" and ".join(kept), hint=hint)


def identities(path: str) -> set[tuple]:
    """The names under which two output paths are one file: the resolved path (a linked folder
    leads there even before the file exists) and, once it exists, its device and inode (a hard
    link)."""
    found: set[tuple] = set()
    try:
        found.add(("path", os.path.realpath(path)))
        info = os.stat(path)
    except (OSError, ValueError):
        return found
    found.add(("inode", info.st_dev, info.st_ino))
    return found
