"""``titan-validate --fix`` and ``--diff``: rewrite legacy TOMLs in place, as ``ruff`` does.

``--fix`` rewrites each TOML (``migrate.tomledit.fix`` says what and how) and the run then reports
the findings that remain; ``--diff`` prints what ``--fix`` would change as a unified diff and
writes nothing (exit 1 when something would change, as ``ruff --diff``). This module is
imported only on those paths: it brings tomlkit, which ``titan-validate``'s plain check must not
pay for.

A file is left untouched, with a line on stderr saying why, when it does not parse, when the
custom config module it declares cannot be read (its keys might be the ones that look old), when
it is read-only, or when it changed while it was being fixed. It is written through
``titan.cli.output.write_text``: atomically, through a symlink to its target, keeping its mode.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from titan.cli.exits import FINDINGS, OK, OutputError, UsageError, say

if TYPE_CHECKING:
    from typing import TextIO

    from schemas.toml_check import CheckOptions
    from titan.cli.validate_args import Args

PROG = "titan-validate"


class FixOutcome:
    """What a ``--fix`` or ``--diff`` pass did over all files."""

    __slots__ = ("changed", "refused", "write_failed")

    def __init__(self) -> None:
        self.changed = 0
        """Files rewritten (``--fix``) or that would be (``--diff``)."""
        self.refused = 0
        """Files that could not be fixed (they do not parse, their module cannot be read...)."""
        self.write_failed = False
        """Whether a rewritten file could not be written (exit 74, as every output failure)."""

    def diff_code(self) -> int:
        """``--diff``'s exit status: 1 when a file would change or could not be examined."""
        return FINDINGS if self.changed or self.refused else OK


def check_flags(args: Args) -> None:
    """The flags that make no sense with ``--fix`` / ``--diff`` (usage errors, before any work)."""
    flag = "--diff" if args.diff else "--fix"
    if args.output is not None:
        raise UsageError(
            f"{flag} rewrites the TOML files themselves; -o names a report file and cannot be "
            "combined with it (run titan-validate -o FILE afterwards for the report)"
        )
    if args.diff and args.format != "text":
        raise UsageError("--diff prints a unified diff; --format applies to the findings report")


def fix_files(
    tomls: list[tuple[str, str]],
    *,
    modules: list[tuple[str, str]],
    options: CheckOptions,
    diff: bool,
    stdout: TextIO,
    stderr: TextIO,
) -> FixOutcome:
    """Fix (or, with ``diff``, show the fixes of) each ``(path, shown)`` TOML."""
    from migrate.tomledit.fix import FixRefused, fix_text
    from schemas.toml_check import check_file

    outcome = FixOutcome()
    for _, shown in modules:
        say(
            f"{PROG}: note: {shown} is a registry module; --fix rewrites TOML files only",
            stream=stderr,
        )
    problems = 0
    for path, shown in tomls:
        before = _identity(path)
        result = check_file(path, options, shown=shown)
        why = _refusal(result)
        fixed = None
        if why is None:
            try:
                fixed = fix_text(result.text, schema=result.schema, era=options.era)
            except FixRefused as error:
                why = str(error)
        if why is not None:
            outcome.refused += 1
            say(f"{PROG}: not fixing {shown}: {why}", stream=stderr)
            continue
        assert fixed is not None and result.text is not None
        if fixed.text == result.text:
            continue
        outcome.changed += 1
        problems += len(fixed.fixes)
        if diff:
            _print_diff(result.text, fixed.text, shown=shown, stream=stdout)
            continue
        if _write(path, shown=shown, old=result.text, new=fixed.text, before=before, stderr=stderr):
            say(f"{PROG}: fixed {_count(len(fixed.fixes))} in {shown}", stream=stderr)
        else:
            outcome.write_failed = True
    if diff and outcome.changed:
        files = "1 file" if outcome.changed == 1 else f"{outcome.changed} files"
        say(f"{PROG}: would fix {_count(problems)} in {files}", stream=stderr)
    return outcome


def _refusal(result) -> str | None:
    """Why a checked file is not fixed, or None."""
    if result.document is None:
        problem = result.diagnostics[0]
        if problem.code == "unreadable-file":
            return problem.message
        line = problem.span.line if problem.span is not None else 1
        return f"it does not parse (line {line}: {problem.message})"
    for finding in result.diagnostics:
        if finding.code == "extension-error":
            return (
                f"its custom config module cannot be read ({finding.message}); the keys it "
                "declares are unknown, so no key of the file can be called old"
            )
    return None


def _count(problems: int) -> str:
    return "1 problem" if problems == 1 else f"{problems} problems"


def _print_diff(old: str, new: str, *, shown: str, stream: TextIO) -> None:
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=shown, tofile=shown
    )
    for line in lines:
        stream.write(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    stream.flush()


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _write(path: str, *, shown: str, old: str, new: str, before, stderr: TextIO) -> bool:
    """Write the fixed text over the file it was read from; False (and a line) if it cannot be."""
    from schemas.toml_source import read_text
    from titan.cli.output import write_text

    try:
        info = os.stat(path)
    except OSError as error:
        return _cannot(shown, error.strerror or str(error), stderr)
    if not stat.S_IMODE(info.st_mode) & 0o222 or not os.access(path, os.W_OK):
        # Checked by mode too: root may write anything, but a file marked read-only is not
        # meant to be rewritten, and replacing it by rename would succeed regardless.
        return _cannot(shown, "the file is read-only", stderr)
    text, _ = read_text(path, shown=shown)
    if (info.st_dev, info.st_ino) != before or text != old:
        return _cannot(
            shown, "it changed while it was being fixed; run titan-validate --fix again", stderr
        )
    try:
        write_text(path, text=new)
    except (OutputError, UsageError) as error:
        return _cannot(shown, str(error), stderr)
    if info.st_nlink > 1:  # the rename gave this name a new file; the other names keep the old
        say(
            f"{PROG}: note: {shown} had {info.st_nlink - 1} other hard link(s); they still "
            "hold the text before the fix",
            stream=stderr,
        )
    return True


def _cannot(shown: str, why: str, stderr: TextIO) -> bool:
    say(f"{PROG}: error: cannot fix {shown}: {why} (nothing was written)", stream=stderr)
    return False
