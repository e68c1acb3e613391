"""``titan-validate --config NAME``: check a registry function's ``Trainer.Config``.

    titan-validate --config llama3_8b [--module llama3] [--registry FILE] [--ngpu 64]
                   [--module-path DIR] [--format text|json|github|sarif] [--strict]
                   [--training.steps 100 ...]

The function is found and run (``titan.cli.registry``, as titan-train does), the
``--section.field`` overrides are applied with tyro exactly as the trainer applies them, then
every field's type and the shared cross-field rules are checked (``titan.config.check``).
Findings point at the line of the registry function that sets the value; a mistake inside the
function (``TrainingConfig(stpes=3)``) is a finding at its file:line:col with did-you-mean, never
a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from typing import TextIO

from titan.cli import registry, report
from titan.cli.exits import UsageError, findings_code
from titan.schemas.diagnostics import Diagnostic

PROG = "titan-validate"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} --config NAME",
        add_help=False,
        description="Check the Trainer.Config a registry function returns.",
    )
    parser.add_argument("--format", choices=report.FORMATS, default="text")
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--ngpu", type=int, default=None)
    parser.add_argument("-o", "--output", default=None)
    parser.add_argument("--color", choices=report.COLORS, default="auto")
    parser.add_argument("--module-path", action="append", default=[], metavar="DIR")
    return parser


def run(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    """The ``--config`` mode of titan-validate; returns the exit code."""
    from titan.cli.output import refuse_inputs
    from titan.config.check import check_config

    wanted = registry.split(argv)
    try:
        options, overrides = build_parser().parse_known_args(wanted.rest)
    except SystemExit as exit_:  # argparse already printed what is wrong
        return 0 if exit_.code in (0, None) else 2
    if wanted.config is None:
        raise UsageError("--config requires a registry function name")
    if options.ngpu is not None and options.ngpu < 1:
        raise UsageError(f"--ngpu must be a positive integer, not {options.ngpu}")
    refuse_inputs({"-o": options.output}, inputs=registry.named_files(wanted))
    from titan.cli import user_code
    from titan.cli.module_path import importable

    user_code.start(prog=PROG, stream=None if options.format == "json" else stderr)

    sources: dict[str, str] = {}
    with importable(options.module_path):  # the registry and the modules it imports
        loaded = registry.load(
            wanted,
            argv=argv,
            overrides=overrides,
            prog=f"{PROG} --config NAME",
            sources=sources,
            stdout=stdout,
            stderr=stderr,
        )
    if loaded.exit_code is not None:
        return loaded.exit_code
    if loaded.finding is not None:
        diagnostics = [loaded.finding]
    else:
        refuse_inputs({"-o": options.output}, inputs=loaded.inputs)
        diagnostics = check_config(loaded.config, ngpu=options.ngpu, locate=loaded.locate)
        diagnostics += _migration_todos(loaded.function)
    diagnostics = sorted((_relative(d) for d in diagnostics), key=Diagnostic.sort_key)
    report.publish(
        diagnostics,
        format=options.format,
        files=max(1, len({d.span.file for d in diagnostics if d.span})),
        sources=report.add_sources(diagnostics, sources=sources),
        color=options.color,
        output=options.output,
        stream=stdout,
        tool=PROG,
        extra={"executed": user_code.executed()},
    )
    return findings_code(diagnostics, strict=options.strict)


def _migration_todos(function) -> list[Diagnostic]:
    """The ``TODO(titan-migrate)`` notes left in the function (warnings: --strict fails)."""
    import inspect

    from titan.config.scan import todos
    from titan.schemas.diagnostics import Severity, Span

    try:
        file = inspect.getsourcefile(function)
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return []
    if file is None:
        return []
    return [
        Diagnostic(
            code="migration-todo",
            severity=Severity.WARNING,
            path="",
            message=f"left by titan-migrate: {todo.text}",
            hint="settle it by hand, then delete the TODO comment (--strict fails on it)",
            span=Span(file=file, line=first + todo.line - 1, col=todo.col),
        )
        for todo in todos("".join(lines))
    ]


def _relative(d: Diagnostic) -> Diagnostic:
    """Name files below the working directory relatively, as the TOML mode does."""
    from titan.migrate.plan.overrides import COMMAND_LINE

    if d.span is None or d.span.file == COMMAND_LINE:
        return d
    relative = os.path.relpath(d.span.file)
    if relative.startswith(os.pardir):
        return d
    return dataclasses.replace(d, span=dataclasses.replace(d.span, file=relative))
