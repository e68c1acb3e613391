"""``titan-migrate DIR``: which TOMLs a run migrates, and which module each one's function goes to.

Folders are walked as ``titan-validate`` walks them (``titan.cli.discover``: ``*.toml`` job
files; ``pyproject.toml`` and other tool configs, hidden and tool folders skipped); files named
on the command line are taken as given. The functions then go to one of three places:

- ``-o FILE`` (or standard output when only files are named): one module with every function;
- ``--out-dir OUT``: one ``config_registry.py`` per folder of TOMLs, mirrored under OUT relative
  to the folder the inputs have in common::

      titan-migrate configs --out-dir OUT

      configs/llama3/8b.toml        ->  OUT/llama3/config_registry.py  (llama3_8b, llama3_70b)
      configs/llama3/70b.toml       ->  OUT/llama3/config_registry.py
      configs/qwen3/0.6b.toml       ->  OUT/qwen3/config_registry.py

- neither, with a folder named: ``config_registry.py`` beside the TOMLs, one per folder.

A per-folder module never replaces a file titan-migrate did not write (its first line is the
module docstring :data:`GENERATED_HEADER` opens), nor an input (a TOML, a custom config module,
a link or hard link to one), nor a module titan-migrate wrote that was edited since or is
read-only (unless ``--force``; ``titan.cli.replace_check``), and two folders whose modules are
one file (a linked folder, a hard link) are both refused rather than written over each other:
that folder is refused with a message, the others are written, and the run exits 1. Each module
is written atomically (``titan.cli.output.write_text``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from titan.cli.exits import OutputError, UsageError, say
from titan.cli.replace_check import GENERATED_HEADER as GENERATED_HEADER
from titan.cli.replace_check import Verdict, identities, verdict

REGISTRY_FILE = "config_registry.py"


class Inputs:
    """The TOMLs to migrate, and what walking the folders met on the way."""

    __slots__ = ("files", "findings", "walked")

    def __init__(self) -> None:
        self.files: list[tuple[str, str]] = []
        """(path to open, name to show) of each TOML, named files as given, walked ones sorted."""
        self.findings: list = []
        """Folders that could not be listed (``unreadable-file`` errors)."""
        self.walked = False
        """Whether a folder was named (folders make one module per folder unless ``-o``)."""


def find_inputs(paths: Sequence[str], *, prog: str, stderr: TextIO) -> Inputs:
    """The TOMLs ``paths`` name: files as given, folders walked (registry modules left out)."""
    from titan.cli.discover import discover, is_registry, skipped_note

    found = Inputs()
    for name in paths:
        if not os.path.isdir(name):
            found.files.append((name, name))
            continue
        found.walked = True
        walk = discover([name])
        found.findings += walk.findings()
        for skipped, kind in walk.skipped:
            say(f"{prog}: note: {skipped_note(skipped, kind)}", stream=stderr)
        tomls = [(path, shown) for path, shown in walk.files if not is_registry(path)]
        if not tomls and not walk.unlisted:
            say(f"{prog}: warning: no TOML job files found under {name}", stream=stderr)
        found.files += tomls
    if found.walked:  # a file named and also met in a walked folder is migrated once
        seen: set[str] = set()
        unique = []
        for path, shown in found.files:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                unique.append((path, shown))
        found.files = unique
    return found


class ModuleTarget:
    """One module a run writes: where, which plans' functions, and what became of it."""

    __slots__ = ("path", "plans", "written", "refused", "hint", "forced")

    def __init__(self, path: str | None, plans: list) -> None:
        self.path = path
        """The file (``None``: standard output)."""
        self.plans = plans
        """The plans whose functions it holds (failed ones are only reported)."""
        self.written = False
        """Whether the file was written."""
        self.refused: str | None = None
        """Why it was not written, for a module that was refused."""
        self.hint = ""
        """What the user can do about the refusal."""
        self.forced: str | None = None
        """What ``--force`` overrode to write it (it was edited, or read-only)."""


def per_folder(
    files: Sequence[tuple[str, str]], plans: Sequence, *, roots: Sequence[str], out_dir: str | None
) -> list[ModuleTarget]:
    """One target per folder of TOMLs: beside them, or mirrored under ``out_dir`` relative to
    the folder the ``roots`` (the paths named) have in common."""
    base = None
    if out_dir is not None:
        folders = [
            os.path.abspath(r) if os.path.isdir(r) else os.path.dirname(os.path.abspath(r))
            for r in roots
        ]
        base = os.path.commonpath(folders)
    targets: dict[str, ModuleTarget] = {}
    for (path, _), plan in zip(files, plans, strict=True):
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in targets:
            if base is None:
                where = os.path.join(os.path.dirname(path), REGISTRY_FILE)
            else:
                where = os.path.join(out_dir, os.path.relpath(folder, base), REGISTRY_FILE)
            targets[folder] = ModuleTarget(os.path.normpath(where), [])
        targets[folder].plans.append(plan)
    return list(targets.values())


def check_out_dir(out_dir: str) -> None:
    """``--out-dir`` must be a folder, or a name where one can be made."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"--out-dir {out_dir} is not a folder; name a folder (it is made if new)")


def input_ids(paths: Sequence[str]) -> set[tuple[int, int]]:
    """The device and inode of every input that exists (a link to one is that file too)."""
    found = set()
    for path in paths:
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            continue
        found.add((info.st_dev, info.st_ino))
    return found


def judge(target: ModuleTarget, *, inputs: set[tuple[int, int]], force: bool) -> None:
    """Decide whether ``target``'s file may be replaced by a per-folder module (a target already
    refused, by :func:`refuse_shared`, stays refused): sets ``refused`` and ``hint``, or
    ``forced`` when ``--force`` overrode an edit or a read-only file."""
    if target.refused is not None:
        return
    found: Verdict = verdict(target.path, inputs=inputs, force=force, named=False)
    target.refused, target.hint, target.forced = found.refused, found.hint, found.forced


def refuse_shared(targets: Sequence[ModuleTarget]) -> None:
    """Refuse every target that is the same file as another (a folder linked to another one, a
    hard link): writing both would leave one module where the report counted two."""
    first: dict[tuple, ModuleTarget] = {}
    for target in targets:
        for name in identities(target.path):
            other = first.setdefault(name, target)
            if other is target:
                continue
            for one, two in ((target, other), (other, target)):
                if one.refused is None:
                    one.refused = f"it is the same file as {two.path} (through a link)"
                    one.hint = "write the two folders' modules to different files (--out-dir DIR)"


def check_output(target: ModuleTarget, *, force: bool, prog: str, stderr: TextIO) -> None:
    """Before ``-o FILE`` is written: raise :class:`UsageError` (nothing written) when FILE is a
    module titan-migrate wrote that was edited since or is read-only, unless ``force``; say so
    when ``force`` overrides that."""
    found = verdict(target.path, inputs=set(), force=force, named=True)
    target.refused, target.hint, target.forced = found.refused, found.hint, found.forced
    if found.refused is not None:
        raise UsageError(
            f"not writing -o {target.path}: {found.refused}; {found.hint} (nothing was written)"
        )
    if found.forced is not None:
        say(
            f"{prog}: note: replacing {target.path} (--force), although {found.forced}",
            stream=stderr,
        )


def write(target: ModuleTarget, code: str, *, make_folders: bool) -> None:
    """Write a per-folder module (its folder made first under ``--out-dir``)."""
    from titan.cli.output import write_text

    if make_folders:
        folder = os.path.dirname(target.path) or os.curdir
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as error:
            raise OutputError(
                f"cannot make the folder {folder}: {error.strerror or error}"
            ) from None
    write_text(target.path, text=code)
    target.written = True


def refused_message(target: ModuleTarget, *, prog: str) -> str:
    """The line that says a folder's module was not written, why, and what to do."""
    return f"{prog}: error: not writing {target.path}: {target.refused}; {target.hint}"


def forced_message(target: ModuleTarget, *, prog: str) -> str:
    """The line that says ``--force`` replaced a module that would have been kept."""
    return f"{prog}: note: replaced {target.path} (--force), although {target.forced}"
