"""``titan-migrate --scaffold-extension FILE.toml...``: the extension module a fork declares.

    titan-migrate --scaffold-extension configs/*.toml > fork_ext.py

then, in ``pyproject.toml``::

    [tool.titan]
    extensions = ["fork_ext.py"]

The module (``titan.migrate.codegen.scaffold``) goes to stdout; to stderr goes one line for each unknown
key left out of it and why (a typo of a real key, a key of an older torchtitan, a name Python cannot
use), so that a fork does not freeze its typos into its schema, and the findings of any file that
could not be read. With ``-o FILE`` the module is written there; a FILE that already holds a
module (the project's declared extension, edited by hand) only gains the declarations it lacks,
every other byte kept (``titan.migrate.codegen.scaffold_merge``), or is refused and left as it
was, and a last line says which keys and classes were added. Exit codes: 0 written, 1 a file
could not be scaffolded or there was nothing to declare (or to add), 2 usage (FILE refused), and
the codes every command shares (``titan.cli.exits``). Never imports torch.
Also runs as ``python -m titan.cli.migrate_scaffold FILE.toml...``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from titan.cli.console import console
from titan.cli.exits import EXIT_STATUS_HELP, FINDINGS, OK, UsageError, guarded, say

PROG = "titan-migrate --scaffold-extension"


def run(files: list[str], stdout: TextIO, stderr: TextIO) -> int:
    """Scaffold the module for ``files``: the module to ``stdout``, the rest to ``stderr``."""
    return guarded(
        lambda: _run(list(files), stdout, stderr), prog=PROG, stdout=stdout, stderr=stderr
    )


def _run(files: list[str], stdout: TextIO, stderr: TextIO) -> int:
    if not files:
        raise UsageError("give the fork's TOML files: --scaffold-extension FILE.toml...")
    from titan.cli.streams import write
    from titan.migrate.codegen.scaffold import scaffold

    result = scaffold(files)
    if result.source is not None:
        write(result.source, out=stdout)
    status = _findings(result, files=files, stderr=stderr)
    if status != OK:
        return status
    if result.source is None:
        say(
            f"{PROG}: nothing to declare: every key of {_files(files)} is known to titan or "
            "left out above",
            stream=stderr,
        )
        return FINDINGS
    return OK


def write_file(
    files: list[str], output: str, *, force: bool, stdout: TextIO, stderr: TextIO
) -> int:
    """``-o FILE``: a new module, or the declarations FILE lacks added to it (every other byte
    kept; ``titan.migrate.codegen.scaffold_merge``), or FILE refused and left as it was."""
    return guarded(
        lambda: _write_file(list(files), output, force=force, stderr=stderr),
        prog=PROG,
        stdout=stdout,
        stderr=stderr,
    )


def _write_file(files: list[str], output: str, *, force: bool, stderr: TextIO) -> int:
    import io

    from titan.cli.output import write_text

    text = _existing(output, force=force, stderr=stderr)
    if text is None:  # a new file (or an empty one, or a device): the whole module
        buffer = io.StringIO()
        status = _run(files, buffer, stderr)
        if buffer.getvalue():
            write_text(output, text=buffer.getvalue())
            say(f"{PROG}: wrote {output}, a new extension module", stream=stderr)
        return status
    if not files:
        raise UsageError("give the fork's TOML files: --scaffold-extension FILE.toml...")
    from titan.migrate.codegen.scaffold_merge import MergeRefused, scaffold_into

    try:
        merged = scaffold_into(files, path=output, text=text)
    except MergeRefused as refused:
        raise UsageError(
            f"not changing {output}: {refused} (nothing was written; without -o the new "
            "declarations go to standard output)"
        ) from None
    status = _findings(merged.result, files=files, stderr=stderr)
    if status != OK:
        return status
    if merged.source is None:
        say(
            f"{PROG}: nothing to add to {output}: it declares every key of {_files(files)} "
            "that titan does not know, except those left out above; it was not changed",
            stream=stderr,
        )
        return FINDINGS
    write_text(output, text=merged.source)
    say(
        f"{PROG}: added to {output}: {', '.join(merged.added)}; every other line of it is "
        "unchanged",
        stream=stderr,
    )
    return OK


def _existing(output: str, *, force: bool, stderr: TextIO) -> str | None:
    """The text of the module ``-o`` names, ``None`` when there is none to keep (no file, an
    empty one, a device or pipe); raises :class:`UsageError` for one that cannot be read or is
    read-only (unless ``force``)."""
    import os
    import stat

    try:
        info = os.stat(output)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or error
        raise UsageError(f"cannot read -o {output}: {reason}") from None
    if not stat.S_ISREG(info.st_mode):
        return None  # a folder is refused by the writer; /dev/null is written in place
    try:
        with open(output, "rb") as handle:
            text = handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise UsageError(f"not changing {output}: it cannot be read as text ({reason})") from None
    if not stat.S_IMODE(info.st_mode) & 0o222:
        if not force:
            raise UsageError(
                f"not changing {output}: it is read-only; make it writable, or pass --force "
                "(nothing was written)"
            )
        say(f"{PROG}: note: writing {output} (--force), although it is read-only", stream=stderr)
    return text if text.strip() else None


def _findings(result, *, files: list[str], stderr: TextIO) -> int:
    """Say what the scaffold left out and why; :data:`FINDINGS` when a file could not be
    scaffolded."""
    for finding in result.declaration:
        then = (
            "the keys it declared are scaffolded again"
            if finding.code == "extension-error"
            else finding.hint
        )
        say(f"note: {finding.span}: {finding.message}; {then}", stream=stderr)
    for line in result.not_declared:
        say(line, stream=stderr)
    if result.problems:
        _render(result.problems, files=files, stderr=stderr)
        say(f"{PROG}: the keys of those files were not scaffolded; fix them first", stream=stderr)
        return FINDINGS
    return OK


def _render(problems: list, *, files: list[str], stderr: TextIO) -> None:
    import io

    from titan.schemas import render

    buffer = io.StringIO()
    render.render(problems, format="text", files=len(files), out=buffer, tool=PROG)
    say(buffer.getvalue().rstrip("\n"), stream=stderr)


def _files(files: list[str]) -> str:
    return files[0] if len(files) == 1 else f"the {len(files)} files"


def _command(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Write the extension module that declares a fork's own sections and keys, "
        "inferred from its TOML files, to stdout; keys that look like typos or older keys are "
        "left out and listed on stderr.",
        epilog='Declare the module in pyproject.toml: [tool.titan] extensions = ["fork_ext.py"]. '
        f"Exit status: 0 written, 1 a file left out or nothing to declare, 2 usage, "
        f"{EXIT_STATUS_HELP}.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE.toml", help="the fork's TOML configs")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:  # argparse printed the problem (or --help)
        return 0 if exit_.code in (0, None) else 2
    return run(args.files, stdout, stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m titan.cli.migrate_scaffold FILE.toml...``; returns the exit code."""
    return console(
        lambda args, *, stdout, stderr: _command(args, stdout=stdout, stderr=stderr),
        argv=argv,
        prog=PROG,
    )


if __name__ == "__main__":
    sys.exit(main())
