"""``titan-validate --config NAME``: check a registry function's ``Trainer.Config``.

    titan-validate --config llama3_8b [--module llama3] [--registry FILE] [--ngpu 64]
                   [--format text|json|github|sarif] [--strict] [--training.steps 100 ...]

The function is found and run (``titan.config.manager``), the ``--section.field`` overrides are
applied with tyro exactly as the trainer applies them, then every field's type and the shared
cross-field rules are checked (``titan.config.check``). Findings point at the line of the registry
function that sets the value; a mistake inside the function (``TrainingConfig(stpes=3)``) is a
finding at its file:line:col with did-you-mean, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
from collections.abc import Sequence
from typing import TextIO

from migrate.overrides import COMMAND_LINE
from schemas.diagnostics import Diagnostic, Severity, Span


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="titan-validate --config NAME",
        add_help=False,
        description="Check the Trainer.Config a registry function returns.",
    )
    parser.add_argument("--format", choices=("text", "json", "github", "sarif"), default="text")
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--ngpu", type=int, default=None)
    parser.add_argument("-o", "--output", default=None)
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    return parser


def registry_finding(error, argv: Sequence[str], sources: dict[str, str]) -> Diagnostic:
    """A ``RegistryError`` as a finding, at its place in user code or else at ``--config``."""
    finding = Diagnostic(
        code=error.code,
        severity=Severity.ERROR,
        path="",
        message=error.message,
        hint=error.hint,
        span=error.span,
    )
    if finding.span is None:
        spans = _command_line_spans(argv, sources)
        finding = dataclasses.replace(finding, span=spans.get("config"))
    return finding


def _source(span_file: str | None, sources: dict[str, str]) -> None:
    if span_file and span_file not in sources:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            with open(span_file, encoding="utf-8") as handle:
                sources[span_file] = handle.read()


def run(argv: Sequence[str], *, stdout: TextIO, stderr: TextIO) -> int:
    """The ``--config`` mode of titan-validate; returns the exit code."""
    from titan.cli.validate import UsageError, exit_code
    from titan.config import manager
    from titan.config.check import check_config
    from titan.config.locate import locator

    try:
        wanted = manager.split_args(argv)
    except manager.RegistryError as error:
        raise UsageError(error.message) from None
    try:
        options, overrides = build_parser().parse_known_args(wanted.rest)
    except SystemExit as exit_:  # argparse already printed what is wrong
        return 0 if exit_.code in (0, None) else 2
    if wanted.config is None:
        raise UsageError("--config requires a registry function name")
    if options.ngpu is not None and options.ngpu < 1:
        raise UsageError(f"--ngpu must be a positive integer, not {options.ngpu}")
    diagnostics: list[Diagnostic] = []
    sources: dict[str, str] = {}
    try:
        found = manager.find(wanted.config, module=wanted.module, registry=wanted.registry)
        config = manager.call(found)
    except manager.RegistryError as error:
        if error.code == "usage":
            raise UsageError(error.message) from None
        diagnostics.append(registry_finding(error, argv, sources))
    else:
        locate = locator(found.function)
        if overrides:
            config = _apply(config, overrides, stdout=stdout, stderr=stderr)
            if isinstance(config, int):  # tyro printed --help or a bad flag
                return config
            spans, in_function = _command_line_spans(argv, sources), locate
            locate = lambda path: spans.get(path) or in_function(path)  # noqa: E731
        diagnostics = check_config(config, ngpu=options.ngpu, locate=locate)
    diagnostics = [_relative(d) for d in diagnostics]
    for d in diagnostics:
        _source(d.span.file if d.span else None, sources)
    diagnostics.sort(key=Diagnostic.sort_key)
    files = max(1, len({d.span.file for d in diagnostics if d.span}))
    _render(options, diagnostics, sources, files, stdout)
    return exit_code(diagnostics, strict=options.strict)


"""The pseudo file name of findings about a ``--section.field`` override."""


def _command_line_spans(argv: Sequence[str], sources: dict[str, str]) -> dict[str, Span]:
    """The span of each ``--flag`` (and of the ``--config`` value) on the command line."""
    text, spans = "", {}
    for index, arg in enumerate(argv):
        start = len(text) + 1 if text else 0
        text = f"{text} {arg}" if text else arg
        if arg.startswith("--"):
            flag = arg.partition("=")[0]
            span = Span(file=COMMAND_LINE, line=1, col=start + 1, end_col=start + 1 + len(flag))
            spans[flag[2:].replace("-", "_")] = span
            if flag == "--config" and index + 1 < len(argv) and "=" not in arg:
                end = start + len(arg) + 1 + len(argv[index + 1])
                spans["config"] = Span(file=COMMAND_LINE, line=1, col=start + 1, end_col=end + 1)
    sources[COMMAND_LINE] = text
    return spans


def _apply(config, overrides: list[str], *, stdout: TextIO, stderr: TextIO):
    """Apply the overrides with tyro; tyro's own messages (and ``--help``) are passed through."""
    from titan.config import manager

    captured_out, captured_err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(captured_out), contextlib.redirect_stderr(captured_err):
            return manager.apply_overrides(config, overrides, prog="titan-validate --config NAME")
    except SystemExit as exit_:
        stdout.write(captured_out.getvalue())
        stderr.write(captured_err.getvalue())
        return 0 if exit_.code in (0, None) else 2


def _relative(d: Diagnostic) -> Diagnostic:
    """Name files below the working directory relatively, as the TOML mode does."""
    if d.span is None or d.span.file == COMMAND_LINE:
        return d
    relative = os.path.relpath(d.span.file)
    if relative.startswith(os.pardir):
        return d
    return dataclasses.replace(d, span=dataclasses.replace(d.span, file=relative))


def _render(options, diagnostics, sources, files: int, stdout: TextIO) -> None:
    from schemas import render
    from titan import __version__
    from titan.cli.validate import UsageError

    out = stdout
    if options.output is not None:
        try:
            out = open(options.output, "w", encoding="utf-8")  # noqa: SIM115
        except OSError as error:
            raise UsageError(f"cannot write {options.output}: {error.strerror or error}") from None
    try:
        if options.format == "json":
            render.render_json(diagnostics, files=files, out=out)
        elif options.format == "github":
            render.render_github(diagnostics, files=files, out=out)
        elif options.format == "sarif":
            render.render_sarif(diagnostics, files=files, out=out, version=__version__)
        else:
            color = {"always": True, "never": False}.get(options.color)
            if color is None and (out is not stdout or os.environ.get("NO_COLOR")):
                color = False
            render.render_text(diagnostics, files=files, out=out, sources=sources, color=color)
    finally:
        if out is not stdout:
            out.close()
