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
import re
from collections.abc import Sequence
from typing import TextIO

from titan.cli import in_process, registry, report
from titan.cli.exits import UsageError, findings_code
from titan.cli.validate_args import positive_seconds
from titan.schemas.diagnostics import Diagnostic, Severity, Span

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
    parser.add_argument("--python", default=None, metavar="PATH")
    parser.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="SECONDS")
    return parser


FILE_OPTIONS = frozenset(
    "--select --memory-limit --no-cache --era --allow-import --extension --export-json-schema "
    "--fix --diff --as-registry --target --version".split()
)
"""titan-validate's options for files and folders, which ``--config`` mode does not take."""

_NUMBER = re.compile(r"-\d[\d_]*(\.\d*)?([eE][-+]?\d+)?|-\.\d+|-inf|-nan", re.IGNORECASE)
"""A negative number: a value of the override before it, not an option."""

_FIELD = re.compile(r"--[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")
"""What can name a config field for tyro: ``--section.field``, or a top-level ``--field`` (the
config a function returns may be a Trainer subclass's, with fields of its own)."""


def refuse_options(parser: argparse.ArgumentParser, overrides: Sequence[str]) -> None:
    """What argparse left is ``--section.field VALUE...`` overrides for tyro (or ``--help``):
    what can be none is refused now, before any registry code runs (``parser.error``: the
    usage and what is wrong, exit 2). Which fields exist is known once the config is built:
    tyro judges the names then."""
    flag = None
    for arg in overrides:
        if arg in ("-h", "--help") or _NUMBER.fullmatch(arg):
            continue
        name = arg.partition("=")[0]
        if name in FILE_OPTIONS:
            parser.error(
                f"{name} is for checking files and folders; --config NAME checks one registry "
                "function and does not take it"
            )
        elif _FIELD.fullmatch(name):
            flag = name
        elif arg.startswith("-"):
            parser.error(
                f"unrecognized option {name}: --config NAME takes the options above and "
                "--section.field VALUE overrides (--config NAME --help lists them)"
            )
        elif flag is None:
            parser.error(
                f"unexpected argument {arg!r}: --config NAME checks one registry function; "
                "to check files or folders, give them without --config"
            )


def run(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    """The ``--config`` mode of titan-validate; returns the exit code."""
    from titan.cli.output import refuse_inputs
    from titan.config.check import check_config

    wanted = registry.split(argv)
    parser = build_parser()
    try:
        options, overrides = parser.parse_known_args(wanted.rest)
        refuse_options(parser, overrides)
    except SystemExit as exit_:  # argparse already printed what is wrong
        return 0 if exit_.code in (0, None) else 2
    if wanted.config is None:
        raise UsageError("--config requires a registry function name")
    if options.ngpu is not None and options.ngpu < 1:
        raise UsageError(f"--ngpu must be a positive integer, not {options.ngpu}")
    refuse_inputs({"-o": options.output}, inputs=registry.named_files(wanted))
    if options.python is not None:  # upstream torchtitan's function, found as upstream finds it
        return _upstream(wanted, options, overrides, stdout=stdout, stderr=stderr)
    from titan.cli import user_code
    from titan.cli.module_path import importable

    user_code.start(prog=PROG, stream=None if options.format == "json" else stderr)

    sources: dict[str, str] = {}
    with in_process.contained() as contained:
        with importable(options.module_path), in_process.no_stdin():
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
            if _is_upstream(loaded.config):  # never judged against titan's own classes
                contained.end()  # what titan's run of the function left
                return _publish_upstream(
                    _module_file(loaded.function),
                    wanted.config,
                    options,
                    stdout=stdout,
                    stderr=stderr,
                )
            with in_process.no_stdin():  # the config's values may be user objects with code
                diagnostics = check_config(loaded.config, ngpu=options.ngpu, locate=loaded.locate)
            diagnostics += _migration_todos(loaded.function)
        span = registry.definition(loaded.function) if loaded.function is not None else None
        left = contained.left(
            doing=f"{wanted.config}() was built",
            span=span or registry.command_line_spans(argv, sources=sources).get("config"),
        )
        diagnostics += [left] if left is not None else []
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


def _is_upstream(config: object) -> bool:
    """A config of upstream torchtitan's classes (where torchtitan is importable beside titan)."""
    return type(config).__module__.partition(".")[0] == "torchtitan"


def _module_file(function: object) -> str | None:
    code = getattr(function, "__code__", None)
    return None if code is None else code.co_filename


SEARCHED = ("torchtitan.models", "torchtitan.experiments", "torchtitan.experiments.rl.examples")
"""Where upstream's ``--module NAME`` looks for ``NAME.config_registry``, in its order."""

_FIND = (
    "import importlib.util, json, sys\n"
    "name, prefixes = sys.argv[1], sys.argv[2:]\n"
    "candidates = [f'{p}.{name}.config_registry' for p in prefixes]\n"
    "candidates += [f'{name}.config_registry', name]\n"
    "for candidate in candidates:\n"
    "    try:\n"
    "        spec = importlib.util.find_spec(candidate)\n"
    "    except (ImportError, ValueError):\n"
    "        continue\n"
    "    if spec is not None and spec.origin and spec.origin.endswith('.py'):\n"
    "        print(json.dumps([candidate, spec.origin]))\n"
    "        break\n"
    "else:\n"
    "    print(json.dumps(None))\n"
)
"""Run in the other interpreter: the file of upstream's ``--module`` (nothing is imported but
the packages above it, as ``find_spec`` does)."""


def _upstream(wanted, options, overrides, *, stdout: TextIO, stderr: TextIO) -> int:
    """``--config NAME --python PATH``: the function of upstream torchtitan (``--module llama3``
    as upstream resolves it, or ``--registry FILE``), checked statically and built there."""
    if overrides:
        raise UsageError(
            "--section.field overrides are not applied to upstream torchtitan's configs here; "
            "check the function as written, or run upstream's own --module/--config with them"
        )
    path = wanted.registry or (
        wanted.module if wanted.module and wanted.module.endswith(".py") else None
    )
    if path is None:
        if wanted.module is None:
            raise UsageError("--python needs --module (a model family, or a module) or --registry")
        path = _find_upstream_module(wanted.module, options.python)
    return _publish_upstream(path, wanted.config, options, stdout=stdout, stderr=stderr)


def _find_upstream_module(module: str, python: str) -> str:
    import json
    import subprocess

    from titan.cli.upstream_build import upstream_python_problem

    problem = upstream_python_problem(python)
    if problem is not None:
        raise UsageError(f"--python {python}: {problem}")
    try:
        done = subprocess.run(
            [python, "-c", _FIND, module, *SEARCHED],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        found = json.loads(done.stdout.strip() or "null") if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = None
    if not (isinstance(found, list) and len(found) == 2 and isinstance(found[1], str)):
        raise UsageError(
            f"--module {module}: torchtitan at {python} has no such module (looked for "
            f"{module}.config_registry under {', '.join(SEARCHED)}, and {module} itself)"
        )
    return found[1]


def _publish_upstream(path, name: str, options, *, stdout: TextIO, stderr: TextIO) -> int:
    from titan.cli.validate_registry import check_modules

    if path is None or not os.path.isfile(path):
        raise UsageError(f"cannot find the file of registry function `{name}`")
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    checked = check_modules(
        [(path, shown)],
        ngpu=options.ngpu,
        select=[name],
        use_cache=False,
        stderr=stderr,
        timeout=options.timeout,
        python=options.python,
    )[0]
    diagnostics = list(checked.diagnostics)
    if name not in checked.declared:
        import difflib

        close = difflib.get_close_matches(name, checked.declared, n=3, cutoff=0.6)
        diagnostics.append(
            Diagnostic(
                code="unknown-config",
                severity=Severity.ERROR,
                path="",
                message=f"no config function `{name}` in {shown}",
                hint=(
                    "did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
                    if close
                    else "its functions: " + ", ".join(checked.declared[:20])
                ),
                span=Span(file=shown, line=1, col=1),
            )
        )
    report.publish(
        diagnostics,
        format=options.format,
        files=1,
        sources={shown: checked.text} if checked.text is not None else {},
        color=options.color,
        output=options.output,
        stream=stdout,
        tool=PROG,
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
