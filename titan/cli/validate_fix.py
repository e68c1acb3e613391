"""``titan-validate --fix`` and ``--diff``: rewrite legacy TOMLs in place, as ``ruff`` does.

``--fix`` rewrites each TOML (``titan.migrate.tomledit.fix`` says what and how) and the run then reports
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

import bisect
import difflib
import os
import stat
from typing import TYPE_CHECKING

from titan.cli.exits import FINDINGS, OK, OutputError, UsageError, say

if TYPE_CHECKING:
    from typing import TextIO

    from titan.cli.validate_args import Args
    from titan.schemas.toml_check import CheckOptions

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
    from titan.migrate.tomledit.fix import FixRefused, fix_text
    from titan.schemas import project
    from titan.schemas.toml_check import check_file

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
                declared = project.for_file(path).era
                fixed = fix_text(
                    result.text, schema=result.schema, era=options.era, project_era=declared
                )
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
    if result.form == "yaml":
        return "--fix rewrites TOML job configs only; a Forge app config (YAML) is checked as is"
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
    """``old`` to ``new`` as ``difflib.unified_diff`` writes it, matched as :class:`_Anchored`
    says."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    started = False
    for group in _Anchored(None, a, b).get_grouped_opcodes(3):
        if not started:
            stream.write(f"--- {shown}\n+++ {shown}\n")
            started = True
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        stream.write(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n")
        for tag, i1, i2, j1, j2 in group:
            lines = [" " + line for line in a[i1:i2]] if tag == "equal" else []
            if tag in ("replace", "delete"):
                lines += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                lines += ["+" + line for line in b[j1:j2]]
            for line in lines:
                end = "" if line.endswith("\n") else "\n\\ No newline at end of file\n"
                stream.write(line + end)
    stream.flush()


def _range(start: int, stop: int) -> str:
    """A hunk's line range as unified diffs write it (``difflib._format_range_unified``)."""
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


class _Anchored(difflib.SequenceMatcher):
    """``difflib.SequenceMatcher`` over the lines between anchors: the lines found once in
    each text, the longest run of them in the same order in both. difflib alone takes time in
    proportion to the lines times the changes; a fix changes every table of a file of
    thousands of tables, and its unchanged lines are mostly found once (a table's header).
    A small file is matched by difflib alone, as ``difflib.unified_diff`` does."""

    def get_matching_blocks(self) -> list[difflib.Match]:
        if self.matching_blocks is not None:
            return self.matching_blocks
        a, b = self.a, self.b
        if len(a) + len(b) <= _WHOLE_LINES:
            return super().get_matching_blocks()
        blocks: list[tuple[int, int, int]] = []
        i0 = j0 = 0
        for i, j in [*_anchors(a, b), (len(a), len(b))]:
            if i > i0 and j > j0:
                inner = difflib.SequenceMatcher(None, a[i0:i], b[j0:j], autojunk=self.autojunk)
                blocks += [(i0 + x, j0 + y, k) for x, y, k in inner.get_matching_blocks() if k]
            if i < len(a):
                blocks.append((i, j, 1))
            i0, j0 = i + 1, j + 1
        merged: list[tuple[int, int, int]] = []
        for i, j, k in blocks:  # adjacent blocks are one, as difflib gives them
            if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
                merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + k)
            else:
                merged.append((i, j, k))
        merged.append((len(a), len(b), 0))
        self.matching_blocks = [difflib.Match(*block) for block in merged]
        return self.matching_blocks


_WHOLE_LINES = 4000
"""Old and new lines together up to which difflib matches the whole texts at once (well
under a second)."""


def _anchors(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` of lines found once in ``a`` and once in ``b``, ``a[i] == b[j]``: the
    longest chain of them increasing in both (patience sorting)."""
    once_a, once_b = _once(a), _once(b)
    pairs = [(i, once_b[line]) for line, i in once_a.items() if line in once_b]
    pairs.sort()
    tops: list[int] = []  # tops[n]: the smallest j ending a chain of n + 1 pairs
    ends: list[int] = []  # the pair index ending that chain
    back: list[int] = []  # each pair's predecessor in its chain
    for index, (_, j) in enumerate(pairs):
        n = bisect.bisect_left(tops, j)
        back.append(ends[n - 1] if n else -1)
        if n == len(tops):
            tops.append(j)
            ends.append(index)
        else:
            tops[n], ends[n] = j, index
    chain = []
    index = ends[-1] if ends else -1
    while index >= 0:
        chain.append(pairs[index])
        index = back[index]
    return chain[::-1]


def _once(lines: list[str]) -> dict[str, int]:
    """The lines found once in ``lines``, with their index."""
    seen: dict[str, int] = {}
    for index, line in enumerate(lines):
        seen[line] = -1 if line in seen else index
    return {line: index for line, index in seen.items() if index >= 0}


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _write(path: str, *, shown: str, old: str, new: str, before, stderr: TextIO) -> bool:
    """Write the fixed text over the file it was read from; False (and a line) if it cannot be."""
    from titan.cli.output import write_text
    from titan.schemas.toml_source import read_text

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
