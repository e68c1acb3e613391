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
edge: the flags are ``titan.cli.migrate_args``, writing the modules ``titan.cli.migrate_write``.
Never imports torch.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import TextIO

from titan.cli import report
from titan.cli.console import console
from titan.cli.exits import UsageError, guarded
from titan.cli.migrate_args import PROG, build_parser
from titan.cli.migrate_write import one_module, write_folder


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-migrate`` console script; returns the exit code."""
    return console(run, argv=argv, prog=PROG)


def run(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    """The command with its streams passed in; returns the exit code."""
    return guarded(
        lambda: _run(list(argv), stdout, stderr), prog=PROG, stdout=stdout, stderr=stderr
    )


def _run(argv: list[str], stdout: TextIO, stderr: TextIO) -> int:
    """Parse the line (legacy overrides after ``--``), migrate each file, write the modules and
    deliver the report; returns the exit code."""
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
                status = max(status, write_folder(target, args=args, taken=taken, stderr=stderr))
            else:
                status = max(status, one_module(target, args=args, stdout=stdout, stderr=stderr))
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
