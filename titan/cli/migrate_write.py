"""Where titan-migrate puts the module it renders: stdout, ``-o FILE``, a ``--check`` or ``--diff``
against a file, or one ``config_registry.py`` per folder of TOMLs (``titan.cli.migrate_tree``
decides which files may be replaced).

Each module's docstring names the command line that regenerates it (:func:`_command`).
"""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from titan.cli import report
from titan.cli.exits import UsageError
from titan.cli.migrate_args import PROG
from titan.cli.module_stamp import stamped


def one_module(target, *, args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Write, check or diff the one module of a run (stdout, ``-o`` or ``--check``)."""
    from titan.migrate.codegen.render_code import function_names, render_module
    from titan.migrate.plan import report as plan_report

    usable = [p for p in target.plans if p.ok]
    if not usable:
        return 0
    try:
        code = render_module(usable, command=_command(args))
    except ValueError as error:  # a shape the code layout cannot print; never a traceback
        raise UsageError(f"cannot write the module: {error}") from None
    plan_report.note_renamed_functions(usable, names=function_names(usable))
    code = stamped(code)
    _self_check(code, args=args)
    if args.output is not None and not (args.diff or args.check):
        from titan.cli.migrate_tree import check_output

        check_output(target, force=args.force, prog=PROG, stderr=stderr)
    printed = None  # the module as printed to stdout: its docstring names no -o
    if args.check:
        printed = stamped(render_module(usable, command=_command(args, output=False)))
    status = _emit(code, args=args, stdout=stdout, stderr=stderr, printed=printed)
    target.written = not (args.diff or args.check)
    return status


def write_folder(target, *, args: argparse.Namespace, taken: set, stderr: TextIO) -> int:
    """Write one folder's module, unless the file there is not titan-migrate's (or an input)."""
    from titan.cli import migrate_tree as tree
    from titan.cli.exits import say
    from titan.migrate.codegen.render_code import function_names, render_module
    from titan.migrate.plan import report as plan_report

    usable = [p for p in target.plans if p.ok]
    if not usable:
        return 0  # nothing to write; the report says why each file failed
    tree.judge(target, inputs=taken, force=args.force)
    if target.refused is None:
        try:
            code = stamped(render_module(usable, command=_command(args)))
        except ValueError as error:  # a shape the code layout cannot print; never a traceback
            target.refused = f"the module cannot be written: {error}"
    if target.refused is None:
        _self_check(code, args=args)
    if target.refused is not None:
        say(tree.refused_message(target, prog=PROG), stream=stderr)
        return 1
    plan_report.note_renamed_functions(usable, names=function_names(usable))
    tree.write(target, code, make_folders=args.out_dir is not None)
    if target.forced is not None:
        say(tree.forced_message(target, prog=PROG), stream=stderr)
    return 0


def _self_check(code: str, *, args: argparse.Namespace) -> None:
    """A module written for upstream torchtitan passes the check ``titan-validate`` runs on it
    (``titan.migrate.registry_check``); one that would not is titan's bug, never written."""
    if args.target == "titan":
        return
    from titan.migrate.registry_check import check_text
    from titan.schemas.diagnostics import Severity

    errors = [d for d in check_text(code, shown="<migrated>") if d.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        line = first.span.line if first.span is not None else 0
        raise RuntimeError(
            f"the module written for {args.target} fails its own check at line {line}: "
            f"{first.message}"
        )


def _command(args: argparse.Namespace, *, output: bool = True) -> str:
    """The command line that regenerates a module (written into its docstring); ``output``:
    it names the ``-o``/``--check`` file (``False``: the module went to stdout)."""
    parts = [PROG, *args.files]
    if args.out_dir is not None:
        parts += ["--out-dir", args.out_dir]
    for name in args.extension:
        parts += ["--extension", name]
    for name, module in args.model_registry:
        parts += ["--model-registry", f"{name}={module}"]
    if args.fix_stale_names:
        parts.append("--fix-stale-names")
    if args.target != "titan":
        parts += ["--target", args.target]
    if output and (args.output or args.check):
        parts += ["-o", args.output or args.check]  # --check compares with what -o wrote
    if args.overrides:
        parts += ["--", *args.overrides]
    import shlex

    return " ".join(shlex.quote(part) for part in parts)  # a name with a space stays one word


def _emit(
    code: str, *, args: argparse.Namespace, stdout: TextIO, stderr: TextIO, printed: str | None
) -> int:
    """Write, check or diff the module; returns 1 for a stale ``--check`` file. ``printed``:
    the same module as stdout gets it, which ``--check`` accepts too (``> FILE`` wrote it)."""
    target = args.check or args.output
    if not (args.diff or args.check):
        report.deliver(code, output=args.output, stream=stdout)
        return 0
    current = _current(target)
    if printed is not None and current == printed:
        code = printed  # the file was written from stdout and is up to date
    if args.diff:
        import difflib

        lines = difflib.unified_diff(
            current.splitlines(keepends=True),
            code.splitlines(keepends=True),
            fromfile=target,
            tofile=f"{target} (migrated now)",
        )
        report.deliver("".join(lines), output=None, stream=stdout)
        return 1 if args.check and current != code else 0
    if current != code:
        report.deliver(
            f"{PROG}: {target} is not what titan-migrate produces now; "
            f"rerun with --diff to see the change, or regenerate it with -o {target}\n",
            output=None,
            stream=stderr,
        )
        return 1
    return 0


def _current(target: str) -> str:
    """The text of the file to compare with; a file that does not exist yet is empty."""
    from titan.schemas.toml_source import read_text

    if not os.path.lexists(target):
        return ""
    text, problem = read_text(target, shown=target)
    if text is None:
        raise UsageError(f"cannot read {target}: {problem.message}")
    return text
