"""``titan-migrate``: legacy TOML files -> ``config_registry.py`` modules, with a report.

    titan-migrate llama3_8b.toml > config_registry.py
    titan-migrate legacy/*.toml -o config_registry.py --strict
    titan-migrate configs/                       # configs/*/config_registry.py, beside the TOMLs
    titan-migrate configs/ --out-dir registry/   # registry/*/config_registry.py
    titan-migrate debug_model.toml -- --training.steps 5      # legacy flags, as the old loader
    titan-migrate legacy/*.toml --check config_registry.py      # CI: is the file up to date?

The code goes to stdout (or ``-o FILE``, never one of the inputs, written atomically); a folder
(or ``--out-dir``) makes one module per folder of TOMLs (``titan.cli.migrate_tree``). The report
of everything dropped, inert, renamed or changing behaviour goes to stderr when the code is on
stdout, else to stdout; a run of several files ends it with a table, one line per file
(``titan.cli.migrate_summary``). Exit codes: 0 migrated (warnings allowed), 1 an error in the
report (or, with ``--strict``, anything not carried; with ``--check``, a stale file; a folder
whose module was refused), 2 usage, and the codes every command shares (``titan.cli.exits``).
The migration itself is ``migrate`` (plan, code renderer, report); this is its command-line
edge. Never imports torch.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from titan.cli import era_option, report
from titan.cli.console import console
from titan.cli.exits import EXIT_STATUS_HELP, UsageError, guarded
from titan.cli.module_stamp import stamped

PROG = "titan-migrate"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Migrate legacy torchtitan TOML configs to a Python config_registry.py: "
        "lossless, or every loss reported.",
        epilog="Legacy command-line overrides go after `--`, as the old loader took them: "
        "titan-migrate x.toml -- --training.steps 5 --checkpoint.enable. Exit status: 0 migrated, "
        "1 errors (or --strict/--check failing, or a folder's module refused), 2 usage, "
        f"{EXIT_STATUS_HELP}.",
    )
    parser.add_argument(
        "files",
        nargs="+",
        metavar="PATH",
        help="legacy TOML configs, Forge app configs (*.yaml, *.yml: their trainer: block), or "
        "folders searched recursively for TOMLs (one module per folder of TOMLs, written "
        "beside them unless -o or --out-dir says otherwise)",
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write one module here (never over an input)"
    )
    parser.add_argument(
        "--scaffold-extension",
        action="store_true",
        help="instead of migrating: write the extension module that declares the fork's own "
        "sections and keys found in the TOMLs (to stdout, or -o FILE: an existing module "
        "there only gains what it lacks, every other line kept); declare it in "
        'pyproject.toml with [tool.titan] extensions = ["fork_ext.py"]',
    )
    parser.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write one config_registry.py per folder of TOMLs under DIR, mirroring the "
        "folders below the one the inputs share",
    )
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
    parser.add_argument("--era", type=era_option.era, metavar="YYYY-MM", help=era_option.HELP)
    parser.add_argument(
        "--format",
        choices=report.FORMATS,
        default="text",
        help="report format (text: summary and findings; json: every key's outcome too)",
    )
    parser.add_argument("--color", choices=report.COLORS, default="auto")
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
    parser.add_argument(
        "--extension",
        action="append",
        default=[],
        metavar="NAME",
        help="merge a custom config module the TOML relies on without declaring it: a built-in "
        "name (flux, ft, vlm, transformers_modeling_backend, simple_fsdp, compiler_toolkit, "
        "autoparallel) or a module path (repeatable)",
    )
    parser.add_argument(
        "--model-registry",
        action="append",
        default=[],
        type=_model_registry,
        metavar="NAME=MODULE",
        help="a model family titan does not ship: model.name NAME migrates to "
        "MODULE.model_registry(flavor) (repeatable; also [tool.titan] model-registries in "
        "pyproject.toml)",
    )
    parser.add_argument(
        "--target",
        default="titan",
        type=_target,
        metavar="TRAINER",
        help="the trainer the code is written for: titan (default) or torchtitan==0.3.0 "
        "(upstream torchtitan's registry; what 0.3.0 cannot express is reported)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a module titan-migrate wrote even if it was edited since or is read-only "
        "(never an input, nor a file titan-migrate did not write)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="report errors only")
    return parser


def _target(text: str) -> str:
    """``--target``: a trainer name ``titan.migrate.targets.choice`` knows."""
    from titan.migrate.targets.choice import resolve

    return resolve(text)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-migrate`` console script; returns the exit code."""
    return console(run, argv=argv, prog=PROG)


def run(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    """The command with its streams passed in; returns the exit code."""
    return guarded(
        lambda: _run(list(argv), stdout, stderr), prog=PROG, stdout=stdout, stderr=stderr
    )


def _run(argv: list[str], stdout: TextIO, stderr: TextIO) -> int:
    overrides: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, overrides = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse printed the problem (or --help)
        return 0 if exit_.code in (0, None) else 2
    args.overrides = overrides
    if args.scaffold_extension:
        return _scaffold(args, stdout=stdout, stderr=stderr)
    if args.diff and not (args.output or args.check):
        raise UsageError("--diff needs -o FILE or --check FILE to compare with")
    from titan.cli import migrate_tree as tree

    if args.out_dir is not None:
        if args.output or args.check:
            raise UsageError(
                "--out-dir writes one module per folder, -o and --check one module: give one"
            )
        tree.check_out_dir(args.out_dir)
    inputs = tree.find_inputs(args.files, prog=PROG, stderr=stderr)
    files = [path for path, _ in inputs.files]
    if args.output is not None and not (args.diff or args.check):
        from titan.cli.output import refuse_inputs

        refuse_inputs({"-o": args.output}, inputs=[*args.files, *files])
    from titan.cli import user_code
    from titan.cli.project import applied_to, say_applied

    user_code.start(prog=PROG, stream=None if args.format == "json" else stderr)
    before = set(sys.modules)
    plans = _plans(inputs.files, args=args, stderr=stderr)
    if args.allow_import:  # a custom config module imported: say which file ran
        user_code.record_modules(before)
    declared = applied_to(files)
    if args.format != "json":
        say_applied(declared, files=files, prog=PROG, stream=stderr)
    module_files = sorted({file for plan in plans for file in plan.module_files})
    if args.output is not None and module_files and not (args.diff or args.check):
        from titan.cli.output import refuse_inputs  # a custom config module read is an input too

        refuse_inputs({"-o": args.output}, inputs=module_files)
    from titan.migrate.plan import report as plan_report

    per_folder = args.out_dir is not None or (inputs.walked and not (args.output or args.check))
    if per_folder:
        targets = tree.per_folder(inputs.files, plans, roots=args.files, out_dir=args.out_dir)
        tree.refuse_shared(targets)
        taken = tree.input_ids([*files, *module_files])
    else:
        targets = [tree.ModuleTarget(args.check or args.output, plans)]
    code_elsewhere = (args.output or args.check or per_folder) and not args.diff
    report_out = stdout if code_elsewhere else stderr
    status = max(plan_report.exit_status(plans, strict=args.strict), 1 if inputs.findings else 0)
    try:
        for target in targets:
            if per_folder:
                status = max(status, _write_folder(target, args=args, taken=taken, stderr=stderr))
            else:
                status = max(status, _one_module(target, args=args, stdout=stdout, stderr=stderr))
    finally:  # the report even when a module could not be written
        text = _report(plans, args=args, out=report_out, inputs=inputs, targets=targets)
        if args.format == "json":
            extra = {"declarations": declared, "executed": user_code.executed()}
            text = report.with_keys(text, extra)
        report.deliver(text, output=None, stream=report_out)
    return status


def _scaffold(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """``--scaffold-extension PATH...``: the fork's extension module
    (``titan.migrate.codegen.scaffold``)."""
    others = [
        flag
        for flag, given in (
            ("--out-dir", args.out_dir),
            ("--check", args.check),
            ("--diff", args.diff),
            ("--strict", args.strict),
            ("--fix-stale-names", args.fix_stale_names),
            ("--model-registry", args.model_registry),
            ("--era", args.era),
            ("--", args.overrides),
        )
        if given
    ]
    if others:
        raise UsageError(f"--scaffold-extension writes one module; it does not take {others[0]}")
    from titan.cli import migrate_scaffold
    from titan.cli import migrate_tree as tree

    inputs = tree.find_inputs(args.files, prog=PROG, stderr=stderr)
    files = [path for path, _ in inputs.files]
    if args.output is None:
        return migrate_scaffold.run(files, stdout, stderr)
    from titan.cli.output import refuse_inputs

    refuse_inputs({"-o": args.output}, inputs=[*args.files, *files])
    return migrate_scaffold.write_file(
        files, args.output, force=args.force, stdout=stdout, stderr=stderr
    )


def _model_registry(text: str) -> tuple[str, str]:
    """``--model-registry NAME=package.module``."""
    import argparse
    import re

    name, equals, module = text.partition("=")
    parts = module.split(".")
    if (
        not equals
        or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name)
        or not all(p.isidentifier() for p in parts)
    ):
        raise argparse.ArgumentTypeError(
            f"expected NAME=package.module (a model.name and an importable module), got {text!r}"
        )
    return name, module


def _plans(files: list[tuple[str, str]], *, args: argparse.Namespace, stderr: TextIO) -> list:
    """Each file's migration plan (a progress bar on a terminal for long runs)."""
    from titan.cli.migrate_summary import progress, wants_progress
    from titan.migrate.plan.build import build_plan
    from titan.schemas.toml_check import CheckOptions

    module_path = ()
    if args.module_path:
        from pathlib import Path

        module_path = tuple(Path(p) for p in args.module_path)
    options = CheckOptions(
        allow_import=args.allow_import,
        module_path=module_path,
        extensions=tuple(args.extension),
    )
    plans = []
    shown_bar = not args.quiet and wants_progress(len(files), stream=stderr)
    with progress(len(files), stream=stderr, enabled=shown_bar) as advance:
        for path, shown in files:
            plans.append(
                build_plan(
                    path,
                    shown=shown,
                    overrides=args.overrides,
                    fix_stale_names=args.fix_stale_names,
                    options=options,
                    model_registries=dict(args.model_registry),
                    era=args.era,
                )
            )
            advance(shown)
    if args.target != "titan":
        from titan.migrate.targets.choice import retarget

        plans = retarget(plans, args.target)
    return plans


def _one_module(target, *, args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
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
    if args.output is not None and not (args.diff or args.check):
        from titan.cli.migrate_tree import check_output

        check_output(target, force=args.force, prog=PROG, stderr=stderr)
    printed = None  # the module as printed to stdout: its docstring names no -o
    if args.check:
        printed = stamped(render_module(usable, command=_command(args, output=False)))
    status = _emit(code, args=args, stdout=stdout, stderr=stderr, printed=printed)
    target.written = not (args.diff or args.check)
    return status


def _write_folder(target, *, args: argparse.Namespace, taken: set, stderr: TextIO) -> int:
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
    if target.refused is not None:
        say(tree.refused_message(target, prog=PROG), stream=stderr)
        return 1
    plan_report.note_renamed_functions(usable, names=function_names(usable))
    tree.write(target, code, make_folders=args.out_dir is not None)
    if target.forced is not None:
        say(tree.forced_message(target, prog=PROG), stream=stderr)
    return 0


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


def _report(plans: list, *, args: argparse.Namespace, out: TextIO, inputs, targets: list) -> str:
    """The report in ``--format``: the plans' summaries and findings (JSON: every key too); a
    run of several files (or folders) adds a line per file: a table, or ``summary`` in JSON."""
    from titan import __version__
    from titan.cli.streams import wants_color
    from titan.migrate.plan import report as plan_report
    from titan.schemas import render
    from titan.schemas.diagnostics import Severity

    buffer = io.StringIO()
    rows = None
    if len(plans) > 1 or inputs.walked or args.out_dir is not None:
        rows = plan_report.tree_summary(plans, modules=_module_of(plans, targets))
    if args.format == "json":
        plan_report.render_json(plans, out=buffer)
        if rows is None and not inputs.findings:
            return buffer.getvalue()
        return _json_with_summary(buffer.getvalue(), rows=rows, inputs=inputs, targets=targets)
    diagnostics = [*inputs.findings, *(d for p in plans for d in p.diagnostics)]
    if args.quiet:
        diagnostics = [d for d in diagnostics if d.severity is Severity.ERROR]
    if args.format == "text":
        color = wants_color(args.color, out=out)
        plan_report.render_text(plans, diagnostics, out=buffer, color=color, quiet=args.quiet)
        if rows is not None and not args.quiet:
            from titan.cli.migrate_summary import table

            buffer.write("\n" + table(rows, targets, out=out, color=color))
    else:
        render.render(
            diagnostics,
            format=args.format,
            files=len(plans),
            out=buffer,
            tool=PROG,
            version=__version__,
        )
    return buffer.getvalue()


def _module_of(plans: list, targets: list) -> list[str | None]:
    """The module each plan's function was written to (``<stdout>``), ``None`` where none was."""
    written = {
        id(plan): target.path or "<stdout>"
        for target in targets
        if target.written
        for plan in target.plans
        if plan.ok
    }
    return [written.get(id(plan)) for plan in plans]


def _json_with_summary(text: str, *, rows: list | None, inputs, targets: list) -> str:
    """The JSON report with the per-file ``summary``, the ``modules`` and any folder that could
    not be listed (``diagnostics``) added."""
    import json

    from titan.schemas.render import as_dict

    document = json.loads(text)
    if rows is not None:
        document["summary"] = rows
        document["modules"] = [
            {
                "path": target.path or "<stdout>",
                "functions": [p.function for p in target.plans if p.ok],
                "written": target.written,
                "refused": target.refused,
                "forced": target.forced,  # what --force overrode to write it
            }
            for target in targets
        ]
    if inputs.findings:
        document["diagnostics"] = [as_dict(d) for d in inputs.findings]
        document["errors"] += len(inputs.findings)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.exit(main())
