"""``titan-migrate``: legacy TOML files -> one ``config_registry.py``, with a report.

    titan-migrate llama3_8b.toml > config_registry.py
    titan-migrate legacy/*.toml -o config_registry.py --strict
    titan-migrate debug_model.toml -- --training.steps 5      # legacy flags, as the old loader
    titan-migrate legacy/*.toml --check config_registry.py      # CI: is the file up to date?

The code goes to stdout (or ``-o FILE``); the report of everything dropped, inert, renamed or
changing behaviour goes to stderr. Exit codes: 0 migrated (warnings allowed), 1 an error in the
report (or, with ``--strict``, anything not carried; with ``--check``, a stale file), 2 usage.
Never imports torch or titan.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from migrate.plan import Plan, build_plan
from schemas.diagnostics import Severity
from schemas.toml_check import CheckOptions

PROG = "titan-migrate"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Migrate legacy torchtitan TOML configs to a Python config_registry.py: "
        "lossless, or every loss reported.",
        epilog="Legacy command-line overrides go after `--`, as the old loader took them: "
        "titan-migrate x.toml -- --training.steps 5 --checkpoint.enable",
    )
    parser.add_argument("files", nargs="+", metavar="FILE.toml", help="legacy TOML configs")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the module here")
    parser.add_argument(
        "--check",
        metavar="FILE",
        help="exit 1 if FILE is not exactly what migrate produces now (for CI)",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="print a unified diff against the -o/--check file instead of writing it",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 unless every key is carried over"
    )
    parser.add_argument(
        "--fix-stale-names",
        action="store_true",
        help='map stale converter names (v0.1 "float8") to their v0.2.2 names',
    )
    parser.add_argument(
        "--format",
        choices=("text", "json", "github", "sarif"),
        default="text",
        help="report format (text: summary and findings; json: every key's outcome too)",
    )
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument(
        "--allow-import",
        action="store_true",
        help="import custom config modules instead of reading their source",
    )
    parser.add_argument(
        "--module-path",
        action="append",
        default=[],
        metavar="DIR",
        help="extra directory to search for custom config modules",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="report errors only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-migrate`` command; returns the exit code."""
    return run(sys.argv[1:] if argv is None else argv, stdout=sys.stdout, stderr=sys.stderr)


def run(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    """``main`` with its streams passed in."""
    argv = list(argv)
    overrides: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, overrides = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse printed the problem (or --help)
        return 0 if exit_.code in (0, None) else 2
    if args.diff and not (args.output or args.check):
        stderr.write(f"{PROG}: error: --diff needs -o FILE or --check FILE to compare with\n")
        return 2
    options = CheckOptions(
        allow_import=args.allow_import, module_path=tuple(Path(p) for p in args.module_path)
    )
    plans = [
        build_plan(
            file,
            overrides=overrides,
            fix_stale_names=args.fix_stale_names,
            options=options,
        )
        for file in args.files
    ]
    from migrate.render_code import function_names, render_module

    usable = [p for p in plans if p.ok]
    try:
        code = render_module(plans, command=_command(args, overrides)) if usable else None
    except ValueError as error:  # a shape the code layout cannot print; never a traceback
        stderr.write(f"{PROG}: error: cannot write the module: {error}\n")
        _report(plans, args, stderr)
        return 2
    _rename_report(usable, function_names(usable))
    status = _exit_status(plans, args.strict)
    report_out = stdout if (args.output or args.check) and not args.diff else stderr
    try:
        if code is not None:
            status = max(status, _emit(code, args, stdout, stderr))
        _report(plans, args, report_out)
        stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
    return status


def _command(args: argparse.Namespace, overrides: list[str]) -> str:
    parts = [PROG, *args.files]
    if args.fix_stale_names:
        parts.append("--fix-stale-names")
    if args.output or args.check:
        parts += ["-o", args.output or args.check]  # --check compares with what -o wrote
    if overrides:
        parts += ["--", *overrides]
    return " ".join(parts)


def _rename_report(plans: list[Plan], names: list[str]) -> None:
    for plan, name in zip(plans, names, strict=True):
        if name != plan.function:
            from schemas.diagnostics import Diagnostic, Span

            plan.diagnostics.append(
                Diagnostic(
                    code="renamed-function",
                    severity=Severity.INFO,
                    path="",
                    message=f"function `{plan.function}` is taken by an earlier file; "
                    f"this one is `{name}`",
                    span=Span(file=plan.source, line=1, col=1),
                )
            )
            plan.function = name


def _exit_status(plans: list[Plan], strict: bool) -> int:
    if any(not p.ok or p.errors() for p in plans):
        return 1
    if strict and not all(p.lossless() for p in plans):
        return 1
    return 0


def _emit(code: str, args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Write, check or diff the module; returns 1 for a stale ``--check`` file or a write error."""
    target = args.check or args.output
    if args.diff or args.check:
        try:
            current = Path(target).read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""
        except (OSError, UnicodeDecodeError) as error:
            stderr.write(f"{PROG}: error: cannot read {target}: {error}\n")
            return 2
        if args.diff:
            import difflib

            stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    code.splitlines(keepends=True),
                    fromfile=target,
                    tofile=f"{target} (migrated now)",
                )
            )
            return 1 if args.check and current != code else 0
        if current != code:
            stderr.write(
                f"{PROG}: {target} is not what titan-migrate produces now; "
                f"rerun with --diff to see the change, or regenerate it with -o {target}\n"
            )
            return 1
        return 0
    if args.output:
        return _write(Path(args.output), code, stderr)
    stdout.write(code)
    return 0


def _write(path: Path, code: str, stderr: TextIO) -> int:
    """Write atomically: a crash never leaves a half-written registry behind."""
    temporary = path.with_name(f".{path.name}.titan-migrate.tmp")
    try:
        temporary.write_text(code, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        stderr.write(f"{PROG}: error: cannot write {path}: {error.strerror or error}\n")
        return 2
    return 0


def _report(plans: list[Plan], args: argparse.Namespace, out: TextIO) -> None:
    from migrate import report

    if args.format == "json":
        report.render_json(plans, out=out)
        return
    diagnostics = [d for p in plans for d in p.diagnostics]
    if args.quiet:
        diagnostics = [d for d in diagnostics if d.severity is Severity.ERROR]
    if args.format in ("github", "sarif"):
        from schemas import render

        renderer = render.render_github if args.format == "github" else render.render_sarif
        renderer(diagnostics, files=len(plans), out=out)
        return
    color = args.color == "always" or (
        args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR")
    )
    report.render_text(plans, diagnostics, out=out, color=color, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
