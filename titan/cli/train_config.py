"""The config of a ``titan-train`` command line, in either of its two forms.

- ``--config NAME [--module M | --registry FILE] [--section.field value ...]``: a registry
  function, with typed overrides applied by tyro, checked by the same rules as titan-validate.
- ``--job.config_file x.toml [legacy flags ...]``: a legacy TOML plus v0.2.2-style flags, turned
  into the same ``Trainer.Config`` by the migrator's live plan. The TOML is never read any other
  way, so the run is exactly what ``titan-migrate`` would have written as code.

Either form takes ``--module-path DIR`` (``titan.cli.module_path``): where the TOML's custom config
module is searched, and where the modules the config imports are found first.

Problems become diagnostics, rendered like titan-validate's; the caller only sees an exit code.
On top of titan-validate's rules, titan-train refuses the parallel degrees the model family's
capability record lacks (e.g. expert tensor parallel for gpt_oss) and a dump
folder it cannot write, before any process group or model exists. ``titan-train --preflight``
(``titan.cli.train_preflight``) reports the same findings without going on to a run.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from titan.cli import registry, report, user_code
from titan.cli.exits import UsageError
from titan.schemas.diagnostics import Diagnostic, Severity, Span

LEGACY_FLAG = "--job.config_file"
PROG = "titan-train"

# Findings the legacy flag parser places on the command line: the command line is malformed
# (exit 2), as when tyro rejects a registry-form flag.
COMMAND_LINE_CODES = frozenset(
    {"cli-syntax", "unknown-key", "moved-key", "wrong-type", "invalid-choice"}
)

Locate = Callable[[str], Span | None]


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


def load(
    argv: Sequence[str],
    *,
    world_size: int,
    stdout: TextIO,
    stderr: TextIO,
    notes: TextIO | None = None,
) -> LoadedConfig:
    """The config ``argv`` names, checked for a run on ``world_size`` processes. Findings go to
    ``stderr``; the notes naming the user files executed go to ``notes`` (default ``stderr``),
    so that they stay out of findings the ranks compare.

    :class:`UsageError` for a malformed command line, and for a ``debug.save_config_file`` that
    would overwrite the TOML or registry file the config was read from.
    """
    from titan.cli import module_path

    # Which user files ran is said once, by the first rank (every rank runs them).
    first = os.environ.get("RANK", "0") == "0"
    user_code.start(prog=PROG, stream=(notes or stderr) if first else None)
    folders, argv = module_path.split(argv)
    # For the whole run: the model is built, and its registry's functions imported, long after
    # the config is read.
    module_path.first_on_path(folders)
    path, rest = split_legacy(argv)
    if path is not None:
        return _legacy(path, rest, world_size=world_size, stderr=stderr, module_path=folders)
    return _registry(argv, world_size=world_size, stdout=stdout, stderr=stderr)


def saved_config_path(config: Any) -> str | None:
    """Where ``debug.save_config_file`` writes the config (inside the dump folder), if set."""
    name, folder = config.debug.save_config_file, config.dump_folder
    if not (name and isinstance(name, str) and isinstance(folder, str)):
        return None  # unset, or of a wrong type: the config check's finding
    return os.path.join(folder, name)


def _refuse_saving_over(config: Any, *, inputs: Sequence[str], key: str) -> None:
    from titan.cli.output import refuse_inputs

    refuse_inputs({key: saved_config_path(config)}, inputs=inputs, makes_folders=True)


def _legacy(
    path: str,
    overrides: list[str],
    *,
    world_size: int,
    stderr: TextIO,
    module_path: Sequence[str] = (),
) -> LoadedConfig:
    from titan.migrate.plan.build import build_plan
    from titan.schemas.toml_check import CheckOptions

    if any(flag.partition("=")[0] in ("--config", "--module", "--registry") for flag in overrides):
        raise UsageError(f"{LEGACY_FLAG} and --config name two configs; give one of them")
    options = CheckOptions(ngpu=world_size, module_path=tuple(map(Path, module_path)))
    plan = build_plan(path, overrides=overrides, options=options)
    sources = {plan.source: plan.text} if plan.text is not None else {}
    flags = registry.command_line_spans(overrides, sources=sources)
    found = [_at_flag(d, flags) for d in plan.diagnostics]
    if any(_malformed_flag(d) for d in found):
        _report(found, sources, stderr=stderr)
        return LoadedConfig(exit_code=2)
    try:
        config = _instantiate(plan, checked=found, path=path)
    except user_code.ImportFailed as stop:  # training runs the project's code: no consent asked
        locate = _legacy_locator(flags, plan.source, plan.text or "")
        span = stop.span or locate("model.name")
        _report([_failed_import(stop, span)], sources, stderr=stderr)
        return LoadedConfig(exit_code=1)
    ngpu = world_size
    if config is not None and _checked_world_size(config, world_size=world_size) is None:
        # A one-process seed run: its layout is checked as for any world size, and the run
        # then takes one process's (titan.training.seed_run).
        ngpu = None
        plan = build_plan(
            path,
            overrides=overrides,
            options=CheckOptions(ngpu=None, module_path=options.module_path),
        )
        found = [_at_flag(d, flags) for d in plan.diagnostics]
    if config is not None:
        _refuse_saving_over(config, inputs=[path], key="job.save_config_file")
        locate = _legacy_locator(flags, plan.source, plan.text or "")
        found = _with_refusals(
            found,
            _refusals(config, dump_key="job.dump_folder", locate=locate, world_size=ngpu),
        )
    if not _report(found, sources, stderr=stderr):
        return LoadedConfig(exit_code=1)
    return LoadedConfig(config=config, form=f"legacy TOML {path}")


def _instantiate(plan: Any, *, checked: list[Diagnostic], path: str) -> Any:
    """The plan's config; None when its findings already fail it and it cannot be built.
    The project's own modules it needs are imported (training runs them); one that cannot be
    is :class:`~titan.cli.user_code.ImportFailed`."""
    if not any(d.severity is Severity.ERROR for d in checked):
        return user_code.build(plan, allow_import=True, toml=path)
    if plan.root is None:
        return None
    try:
        return user_code.build(plan, allow_import=True, toml=path)
    except user_code.ImportFailed:
        raise
    except Exception:  # a plan with errors may not build; its findings say why
        return None


def _failed_import(stop: Any, span: Span | None) -> Diagnostic:
    return Diagnostic(
        code="user-code",
        severity=Severity.ERROR,
        path="model.name",
        message=stop.message,
        hint=stop.hint,
        span=span,
    )


def _registry(
    argv: Sequence[str], *, world_size: int, stdout: TextIO, stderr: TextIO
) -> LoadedConfig:
    from titan.config.check import check_config

    wanted = registry.split(argv)
    if wanted.config is None:
        raise UsageError(
            f"name a config: --config NAME (a registry function) or {LEGACY_FLAG} x.toml"
        )
    sources: dict[str, str] = {}
    loaded = registry.load(
        wanted,
        argv=argv,
        overrides=wanted.rest,
        prog=f"{PROG} --config {wanted.config}",
        sources=sources,
        stdout=stdout,
        stderr=stderr,
    )
    if loaded.exit_code is not None:
        return LoadedConfig(exit_code=loaded.exit_code)
    if loaded.finding is not None:
        _report([loaded.finding], sources, stderr=stderr)
        return LoadedConfig(exit_code=1)
    config, locate = loaded.config, loaded.locate
    _refuse_saving_over(config, inputs=loaded.inputs, key="debug.save_config_file")
    ngpu = _checked_world_size(config, world_size=world_size)
    found = check_config(config, ngpu=ngpu, locate=locate)
    found = _with_refusals(
        found, _refusals(config, dump_key="dump_folder", locate=locate, world_size=ngpu)
    )
    if not _report(found, sources, stderr=stderr):
        return LoadedConfig(exit_code=1)
    return LoadedConfig(config=config, form=f"registry config {wanted.config}")


def _checked_world_size(config: Any, *, world_size: int) -> int | None:
    """The world size the config's layout is checked for: ``world_size``, or None (any) for a
    seed checkpoint made by one process, which runs on one process's layout whatever the
    config's degrees (``titan.training.seed_run``)."""
    from titan.training.seed_run import is_seed_run

    return None if is_seed_run(config, world_size=world_size) else world_size


def _refusals(
    config: Any, *, dump_key: str, locate: Locate, world_size: int | None
) -> list[Diagnostic]:
    """What titan-train cannot run although titan-validate accepts it; ``dump_key`` is the
    dump folder's key in the user's form (``dump_folder`` or the legacy ``job.dump_folder``)."""
    found = []
    spec = config.model_spec
    # The parallel degrees the model's capability check refuses; the rest of its refusals come
    # from titan-train's build, which runs the same check.
    refused = [] if spec is None else spec.refusals(config, world_size=world_size)
    for refusal in refused:
        if refusal.key.startswith("parallelism."):
            hint = f"{refusal.hint}; titan-validate and titan-migrate still accept the config"
            found.append(
                _error("unsupported-parallelism", refusal.key, refusal.message, hint, locate)
            )
    # A dump folder of the wrong type is the config check's finding.
    folder = config.dump_folder
    problem = _dump_folder_problem(folder) if isinstance(folder, str) else None
    if problem is not None:
        message, hint = problem
        found.append(_error("dump-folder", dump_key, f"{dump_key} {message}", hint, locate))
    return found


def _dump_folder_problem(folder: str) -> tuple[str, str] | None:
    """Why titan-train could not write into ``folder`` (message, hint), or None if it can.

    Nothing is left behind: an unnamed file is made and dropped in the folder, or in its nearest
    existing parent when the run would create it.
    """
    shown = repr(folder)
    if "\0" in folder:
        return f"{shown} contains a NUL character", "name a folder without one"
    path = Path(folder or ".")
    try:
        if path.exists() and not path.is_dir():
            return (
                f"{shown} is a file, not a folder",
                "name a folder (titan-train creates it when missing); the file was not touched",
            )
        existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
        if not existing.is_dir():
            return (
                f"{shown} cannot be created: {str(existing)!r} is a file",
                "name a folder whose parents are folders; the file was not touched",
            )
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        return (
            f"{shown} is not writable: {error.strerror or error}",
            "choose a folder this user can write to",
        )
    return None


def _with_refusals(found: list[Diagnostic], refused: list[Diagnostic]) -> list[Diagnostic]:
    """``found`` plus titan-train's refusals. A refused degree's other findings (how it splits the
    world size, whether the model has experts) are moot while it must be 1, so they are left out."""
    moot = {d.path for d in refused if d.code == "unsupported-parallelism"}
    if not moot:
        return [*found, *refused]
    kept = [d for d in found if d.code != "world-size" and d.path not in moot]
    return [*kept, *refused]


def _error(code: str, path: str, message: str, hint: str, locate: Locate) -> Diagnostic:
    return Diagnostic(
        code=code, severity=Severity.ERROR, path=path, message=message, hint=hint, span=locate(path)
    )


def _malformed_flag(d: Diagnostic) -> bool:
    from titan.migrate.plan.overrides import COMMAND_LINE

    return (
        d.severity is Severity.ERROR
        and d.code in COMMAND_LINE_CODES
        and d.span is not None
        and d.span.file == COMMAND_LINE
    )


def _at_flag(d: Diagnostic, flags: dict[str, Span]) -> Diagnostic:
    """A finding about a key that a flag overrides points at the flag, not at the TOML line the
    flag replaced (the migrator's checks place every rule finding in the file)."""
    flag = flags.get(d.path)
    if flag is None or d.span is None or d.span.file == flag.file:
        return d
    return dataclasses.replace(d, span=flag)


def _legacy_locator(flags: dict[str, Span], source: str, text: str) -> Locate:
    """A legacy key's flag on the command line, else its key in the TOML (or its table's)."""
    from titan.schemas.spans import locate_keys

    keys = locate_keys(text) if text else {}

    def locate(path: str) -> Span | None:
        if path in flags:
            return flags[path]
        parts = tuple(path.split("."))
        while parts:
            found = keys.get(parts)
            if found is not None:
                return Span(file=source, line=found.line, col=found.col, end_col=found.end_col)
            parts = parts[:-1]
        return None

    return locate


def _report(diagnostics: list[Diagnostic], sources: dict[str, str], *, stderr: TextIO) -> bool:
    """Print the findings; whether the run may go on (no errors). Under torchrun every rank
    renders its own: ``titan-train`` decides which ranks' findings reach the terminal."""
    if diagnostics:
        report.publish(
            sorted(diagnostics, key=Diagnostic.sort_key),
            format="text",
            files=max(1, len({d.span.file for d in diagnostics if d.span})),
            sources=report.add_sources(diagnostics, sources=sources),
            color="auto",
            output=None,
            stream=stderr,
            tool=PROG,
        )
    return not any(d.severity is Severity.ERROR for d in diagnostics)
