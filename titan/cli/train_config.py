"""The config of a ``titan-train`` command line, in either of its two forms.

- ``--config NAME [--module M | --registry FILE] [--section.field value ...]``: a registry
  function, with typed overrides applied by tyro, checked by the same rules as titan-validate.
- ``--job.config_file x.toml [legacy flags ...]``: a legacy TOML plus v0.2.2-style flags, turned
  into the same ``Trainer.Config`` by the migrator's live plan. The TOML is never read any other
  way, so the run is exactly what ``titan-migrate`` would have written as code.

Problems become diagnostics, rendered like titan-validate's; the caller only sees an exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from collections.abc import Sequence
from typing import Any, TextIO

from schemas.diagnostics import Diagnostic, Severity

LEGACY_FLAG = "--job.config_file"
PROG = "titan-train"


@dataclasses.dataclass(slots=True)
class LoadedConfig:
    """A runnable config, or the exit code to return when there is none."""

    config: Any = None
    exit_code: int = 0
    form: str = ""
    """``registry NAME`` or ``legacy PATH``, for the run's first log line."""


def split_legacy(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """``--job.config_file PATH`` (or ``=PATH``) taken out of argv; the rest is kept in order."""
    rest: list[str] = []
    path: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag == LEGACY_FLAG:
            if not eq:
                if i + 1 >= len(args):
                    raise UsageError(f"{LEGACY_FLAG} requires a path")
                value = args[i + 1]
                i += 1
            path = value
        else:
            rest.append(args[i])
        i += 1
    return path, rest


class UsageError(Exception):
    """A malformed command line (exit code 2)."""


def load(argv: Sequence[str], *, world_size: int, stdout: TextIO, stderr: TextIO) -> LoadedConfig:
    """The config ``argv`` names, checked for a run on ``world_size`` processes."""
    path, rest = split_legacy(argv)
    if path is not None:
        return _legacy(path, rest, world_size=world_size, stderr=stderr)
    return _registry(argv, world_size=world_size, stdout=stdout, stderr=stderr)


def _legacy(path: str, overrides: list[str], *, world_size: int, stderr: TextIO) -> LoadedConfig:
    from migrate.live import instantiate
    from migrate.plan import build_plan
    from schemas.toml_check import CheckOptions

    if any(flag.partition("=")[0] in ("--config", "--module", "--registry") for flag in overrides):
        raise UsageError(f"{LEGACY_FLAG} and --config name two configs; give one of them")
    plan = build_plan(path, overrides=overrides, options=CheckOptions(ngpu=world_size))
    sources = {plan.source: plan.text} if plan.text is not None else {}
    if not _report(plan.diagnostics, sources, stderr=stderr):
        return LoadedConfig(exit_code=1)
    return LoadedConfig(config=instantiate(plan), form=f"legacy TOML {path}")


def _registry(
    argv: Sequence[str], *, world_size: int, stdout: TextIO, stderr: TextIO
) -> LoadedConfig:
    from titan.cli.validate_config import _command_line_spans
    from titan.config import manager
    from titan.config.check import check_config
    from titan.config.locate import locator

    try:
        wanted = manager.split_args(argv)
    except manager.RegistryError as error:
        raise UsageError(error.message) from None
    if wanted.config is None:
        raise UsageError(
            f"name a config: --config NAME (a registry function) or {LEGACY_FLAG} x.toml"
        )
    sources: dict[str, str] = {}
    try:
        found = manager.find(wanted.config, module=wanted.module, registry=wanted.registry)
        config = manager.call(found)
    except manager.RegistryError as error:
        if error.code == "usage":
            raise UsageError(error.message) from None
        finding = Diagnostic(
            code=error.code,
            severity=Severity.ERROR,
            path="config",
            message=error.message,
            hint=error.hint,
            span=error.span,
        )
        _report([finding], sources, stderr=stderr)
        return LoadedConfig(exit_code=1)
    locate = locator(found.function)
    if wanted.rest:
        captured_out, captured_err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(captured_out), contextlib.redirect_stderr(captured_err):
                config = manager.apply_overrides(
                    config, wanted.rest, prog=f"{PROG} --config {wanted.config}"
                )
        except SystemExit as exit_:  # tyro printed --help or what is wrong with a flag
            stdout.write(captured_out.getvalue())
            stderr.write(captured_err.getvalue())
            return LoadedConfig(exit_code=0 if exit_.code in (0, None) else 2)
        spans, in_function = _command_line_spans(argv, sources), locate
        locate = lambda path: spans.get(path) or in_function(path)  # noqa: E731
    if not _report(check_config(config, ngpu=world_size, locate=locate), sources, stderr=stderr):
        return LoadedConfig(exit_code=1)
    return LoadedConfig(config=config, form=f"registry config {wanted.config}")


def _report(diagnostics: list[Diagnostic], sources: dict[str, str], *, stderr: TextIO) -> bool:
    """Print the findings (rank 0 only); whether the run may go on (no errors)."""
    from schemas import render

    if diagnostics and int(os.environ.get("RANK", "0")) == 0:
        for d in diagnostics:
            if d.span is not None and d.span.file not in sources:
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    with open(d.span.file, encoding="utf-8") as handle:
                        sources[d.span.file] = handle.read()
        files = max(1, len({d.span.file for d in diagnostics if d.span}))
        ordered = sorted(diagnostics, key=Diagnostic.sort_key)
        render.render_text(ordered, files=files, out=stderr, sources=sources, color=False)
    return not any(d.severity is Severity.ERROR for d in diagnostics)
