"""Registry functions on the command line, one way for titan-train, titan-validate and titan-diff.

``lookup`` finds a function (``--config NAME`` with ``--module`` / ``--registry``, or titan-diff's
``NAME`` and ``MODULE:NAME`` operands, which mean the same search) and runs it. Whatever the
user's code does there becomes a :class:`~titan.config.manager.RegistryError` located in that
code: an exception, a value that is not a config, and ``sys.exit()`` / ``raise SystemExit`` too
(a registry that exits would otherwise end the command with the code it chose, silently).

``load`` is the whole ``--config NAME [--module M] [--registry FILE] [--section.field V ...]``
command line, shared by the two commands that take one (titan-train, titan-validate --config).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from titan.cli.exits import UsageError
from titan.schemas.diagnostics import Diagnostic, Severity, Span


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """A registry function and the config it returned."""

    function: Any
    """The :class:`~titan.config.manager.RegistryFunction`."""
    config: Any
    """What it returned (a dataclass config instance)."""


def lookup(name: str, *, module: str | None = None, registry: str | None = None) -> Found:
    """Find the registry function ``name`` and run it (see ``titan.config.manager.find``)."""
    import sys

    from titan.cli import user_code
    from titan.config import manager

    # Said before they run: a registry file that fails or hangs was still executed.
    for path in _files_run(module=module, registry=registry):
        user_code.record(path)
    before = set(sys.modules)
    try:
        with exit_is_an_error(f"looking up {name}"):
            function = manager.find(name, module=module, registry=registry)
        with exit_is_an_error(f"running {name}()"):
            config = manager.call(function)
    finally:
        user_code.record_modules(before)  # a --module package, and what the registries import
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise manager.RegistryError(
            f"{name}() returned {type(config).__name__}, not a config",
            code="registry-error",
            hint="a registry function returns a Trainer.Config",
            span=definition(function.function),
        )
    return Found(function=function, config=config)


def named_files(wanted: Any) -> list[str]:
    """The registry files a ``--config`` command line reads (``manager.split_args``'s answer),
    known before any of them runs."""
    return _files_run(module=wanted.module, registry=wanted.registry)


def _files_run(*, module: str | None, registry: str | None) -> list[str]:
    """The registry files a lookup imports: ``--module FILE.py``, else ``--registry FILE`` and
    ``./config_registry.py`` (imported even for a built-in name: the user's own come first)."""
    from titan.config import manager

    if module is not None:
        named = [module] if module.endswith(".py") or os.sep in module else []
    else:
        named = [p for p in (registry, manager.REGISTRY_FILE) if p]
    return [path for path in named if os.path.isfile(path)]


def source_files(found: Found) -> list[str]:
    """The files the function came from (a command never writes over them)."""
    path = getattr(found.function.module, "__file__", None)
    return [path] if path else []


@contextlib.contextmanager
def exit_is_an_error(doing: str) -> Iterator[None]:
    from titan.config import manager

    try:
        yield
    except SystemExit as exit_:
        raise manager.RegistryError(
            f"the registry code exited (SystemExit({exit_.code!r})) while {doing}",
            code="registry-error",
            hint="a registry function must return its config; raise an exception to report a "
            "problem",
            span=exit_call(exit_),
        ) from None


def exit_call(exit_: SystemExit) -> Span | None:
    """Where the exit was called: the innermost Python frame of its traceback."""
    import linecache

    tb = exit_.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    file, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
    text = linecache.getline(file, line)
    return Span(file=file, line=line, col=len(text) - len(text.lstrip()) + 1)


def definition(function: Any) -> Span | None:
    code = getattr(function, "__code__", None)
    return None if code is None else Span(file=code.co_filename, line=code.co_firstlineno, col=1)


def finding(error: Any, *, argv: Sequence[str], sources: dict[str, str]) -> Diagnostic:
    """A ``RegistryError`` as a finding, at its place in user code or else at ``--config``."""
    span = error.span or command_line_spans(argv, sources=sources).get("config")
    return Diagnostic(
        code=error.code,
        severity=Severity.ERROR,
        path="",
        message=error.message,
        hint=error.hint
        or "fix the code at this line: titan imports the registry and runs the function to "
        "build its config",
        span=span,
    )


def command_line_spans(argv: Sequence[str], *, sources: dict[str, str]) -> dict[str, Span]:
    """The span of each ``--flag`` (and of the ``--config`` value) on the command line; the
    command line itself is added to ``sources`` under its pseudo file name."""
    from titan.migrate.plan.overrides import COMMAND_LINE

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


def split(argv: Sequence[str]) -> Any:
    """``--config``, ``--module`` and ``--registry`` taken out of ``argv``
    (``manager.split_args``); a flag without its value is a :class:`UsageError`."""
    from titan.config import manager

    try:
        return manager.split_args(argv)
    except manager.RegistryError as error:
        raise UsageError(error.message) from None


@dataclasses.dataclass(frozen=True, slots=True)
class Loaded:
    """A ``--config`` command line's config with its overrides applied, or why there is none."""

    config: Any = None
    function: Any = None
    """The registry function that made it (its source holds any TODO notes)."""
    locate: Callable[[str], Span | None] | None = None
    """Where a config path is set: its ``--flag``, else its line in the registry function."""
    inputs: tuple[str, ...] = ()
    """The registry files read (a command never writes over them)."""
    finding: Diagnostic | None = None
    """Why the function could not be found or run."""
    exit_code: int | None = None
    """Set when tyro printed ``--help`` or rejected an override."""


def load(
    wanted: Any,
    *,
    argv: Sequence[str],
    overrides: Sequence[str],
    prog: str,
    sources: dict[str, str],
    stdout: TextIO,
    stderr: TextIO,
) -> Loaded:
    """Find and run ``wanted.config`` (``split``'s answer for ``argv``) and apply the
    ``--section.field`` ``overrides`` with tyro, exactly as titan-train does."""
    from titan.config import manager
    from titan.config.locate import locator

    try:
        found = lookup(wanted.config, module=wanted.module, registry=wanted.registry)
    except manager.RegistryError as error:
        if error.code == "usage":
            raise UsageError(error.message) from None
        return Loaded(finding=finding(error, argv=argv, sources=sources))
    config, locate = found.config, locator(found.function.function)
    if overrides:
        captured_out, captured_err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(captured_out), contextlib.redirect_stderr(captured_err):
                config = manager.apply_overrides(config, list(overrides), prog=prog)
        except SystemExit as exit_:  # tyro printed --help or what is wrong with a flag
            from titan.cli import streams

            streams.write(captured_out.getvalue(), out=stdout)
            streams.write(captured_err.getvalue(), out=stderr)
            return Loaded(exit_code=0 if exit_.code in (0, None) else 2)
        spans, in_function = command_line_spans(argv, sources=sources), locate
        locate = lambda path: spans.get(path) or in_function(path)  # noqa: E731
    inputs = (*named_files(wanted), *source_files(found))
    return Loaded(config=config, function=found.function.function, locate=locate, inputs=inputs)
