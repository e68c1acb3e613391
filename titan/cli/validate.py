"""``titan-validate``: every problem of legacy TOML job configs in one pass, CI-ready.

Exit codes (``titan.cli.exits``): 0 clean (warnings allowed unless ``--strict``), 1 findings,
2 usage or internal error, 74 the report could not be written, 130 interrupted, 143 terminated.

This command runs in pre-commit hooks on every commit and must start in tens of milliseconds, so
nothing heavy is imported at module level: the checker, the renderers, ``pathlib`` and even
``argparse`` are imported on the paths that need them (see ``titan.cli.validate_args``). A mode
with heavy dependencies (a registry ``--config`` check) branches off in ``run`` before the TOML
path and imports its modules there.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from titan.cli.console import console
from titan.cli.exits import WRITE_FAILED, UsageError, findings_code, guarded, say

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from titan.cli.validate_args import Args

PROG = "titan-validate"

_only_titan_ran = False
"""Set once a check that ran no user code (no ``--allow-import``) is done; see ``main``."""


def run(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """The whole command; returns the exit code (``main`` exits with it)."""
    global _only_titan_ran
    _only_titan_ran = False
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    return guarded(lambda: _run(argv, stdout, stderr), prog=PROG, stdout=stdout, stderr=stderr)


def _run(argv: list[str], stdout: TextIO, stderr: TextIO) -> int:
    # ``--config`` (a registry function) imports titan's config tree, tyro and pydantic; it
    # branches off here so the TOML path below stays as lean as it is.
    if any(arg == "--config" or arg.startswith("--config=") for arg in argv):
        from titan.cli import validate_config

        return validate_config.run(argv, stdout=stdout, stderr=stderr)
    from titan.cli.validate_args import build_parser, parse_common

    args = parse_common(argv)
    if args is None:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exit_:
            return 0 if exit_.code == 0 else 2
    return _validate(args, stdout, stderr)


def _validate(args: Args, stdout: TextIO, stderr: TextIO) -> int:
    from titan.cli.discover import discover, is_registry

    if not args.paths and args.export_json_schema is None:
        raise UsageError(
            "nothing to do: give TOML files, registry modules (*.py) or directories "
            "(or --export-json-schema FILE)"
        )
    if args.fix or args.diff:
        from titan.cli.validate_fix import check_flags

        check_flags(args)
    if args.target != "titan" and not args.as_registry:
        raise UsageError(
            f"--target {args.target} says which trainer --as-registry migrates for: add "
            "--as-registry"
        )
    from titan.cli import user_code

    user_code.start(prog=PROG, stream=None if args.format == "json" else stderr)
    found = discover(args.paths)
    if args.output is not None or args.export_json_schema is not None:
        from titan.cli.output import refuse_inputs

        refuse_inputs(
            {"-o": args.output, "--export-json-schema": args.export_json_schema},
            inputs=[*args.paths, *(path for path, _ in found.files)],
        )
    options = _options(args)
    if args.export_json_schema is not None:
        _export_schema(args.export_json_schema, options=options, stderr=stderr)
        if not args.paths:
            return 0
    from titan.cli.discover import skipped_note

    for name, kind in found.skipped:
        say(f"{PROG}: note: {skipped_note(name, kind)}", stream=stderr)
    if not found.files and not found.unlisted:
        say(
            f"{PROG}: warning: no TOML files or registry modules found under "
            f"{', '.join(args.paths)}",
            stream=stderr,
        )
    tomls = [(path, shown) for path, shown in found.files if not is_registry(path)]
    modules = [(path, shown) for path, shown in found.files if is_registry(path)]
    fixing = None
    if args.fix or args.diff:  # rewrite first: the report is about the files as fixed
        from titan.cli.validate_fix import fix_files

        fixing = fix_files(
            tomls, modules=modules, options=options, diff=args.diff, stdout=stdout, stderr=stderr
        )
        if args.diff:
            return fixing.diff_code()
    diagnostics, sources, read = found.findings(), {}, set()
    if tomls:
        from titan.schemas.toml_check import check_file

    imports = _importable(args.module_path)  # what --as-registry's migrated configs import
    for path, shown in tomls:
        before = set(sys.modules) if args.allow_import else None
        result = check_file(path, options, shown=shown)
        if before is not None:  # a custom config module imported: say which file ran
            user_code.record_modules(before)
        diagnostics += result.diagnostics
        if args.as_registry and result.document is not None:
            with imports():
                diagnostics += _as_registry(
                    result, path=path, shown=shown, options=options, target=args.target
                )
        if result.text is not None:
            sources[shown] = result.text
        read.update(e.file for e in result.extensions if e.file)
    imported = False
    if args.select and not modules:
        raise UsageError("--select names registry functions, but no registry module was given")
    if modules:
        found_in_modules, imported = _registry_modules(modules, args, sources, stderr)
        diagnostics += found_in_modules
    if args.output is not None and read:  # a custom config module read is an input too
        from titan.cli.output import refuse_inputs

        refuse_inputs({"-o": args.output}, inputs=sorted(read))
    from titan.cli.project import applied_to, say_applied
    from titan.cli.report import publish

    declared = applied_to(path for path, _ in found.files)
    if args.format != "json":
        say_applied(declared, files=[p for p, _ in found.files], prog=PROG, stream=stderr)
    publish(
        diagnostics,
        format=args.format,
        files=len(found.files),
        sources=sources,
        color=args.color,
        output=args.output,
        stream=stdout,
        tool=PROG,
        extra={"declarations": declared, "executed": user_code.executed()},
    )
    global _only_titan_ran
    # user code imported: let it shut down as it expects
    _only_titan_ran = not args.allow_import and not imported
    if fixing is not None and fixing.write_failed:
        return WRITE_FAILED
    return findings_code(diagnostics, strict=args.strict)


def _registry_modules(
    modules: list[tuple[str, str]], args: Args, sources: dict[str, str], stderr: TextIO
) -> tuple[list, bool]:
    """Check the registry modules; their findings, and whether any module's code ran."""
    from titan.cli.validate_registry import check_modules

    select = [part.strip() for item in args.select for part in item.split(",") if part.strip()]
    checked = check_modules(
        modules,
        ngpu=args.ngpu,
        select=select,
        use_cache=not args.no_cache,
        stderr=stderr,
        timeout=args.timeout,
        memory_limit=args.memory_limit,
        module_path=tuple(args.module_path),
        python=args.python,
    )
    from titan.cli import user_code

    diagnostics = []
    for (path, shown), result in zip(modules, checked, strict=True):
        if result.imported:
            user_code.record(path)
        diagnostics += result.diagnostics
        if result.text is not None:
            sources[shown] = result.text
        if not result.declared and not result.diagnostics:
            say(f"{PROG}: note: {shown} defines no registry functions", stream=stderr)
    if select:
        _check_selected(select, declared=[n for r in checked for n in r.declared])
    from titan.cli.report import add_sources

    add_sources(diagnostics, sources=sources)
    return diagnostics, any(r.imported for r in checked)


def _check_selected(select: list[str], *, declared: list[str]) -> None:
    """A ``--select`` name that matches no registry function is a usage error (a typo there
    would otherwise check nothing and pass)."""
    import fnmatch

    for pattern in select:
        if any(fnmatch.fnmatchcase(name, pattern) for name in declared):
            continue
        import difflib

        close = difflib.get_close_matches(pattern, sorted(set(declared)), n=3, cutoff=0.6)
        hint = " or ".join(f"`{c}`" for c in close)
        raise UsageError(
            f"--select {pattern} matches no registry function in the modules checked"
            + (f"; did you mean {hint}?" if close else "")
        )


def _importable(folders: list[str]):
    """A context putting the ``--module-path`` folders first on ``sys.path`` (none: nothing to
    import, so the module that does it is not loaded on the hooks' path)."""
    if not folders:
        import contextlib

        return contextlib.nullcontext
    from titan.cli.module_path import importable

    return lambda: importable(folders)


def _options(args: Args):
    from titan.schemas.toml_check import CheckOptions

    module_path = ()
    if args.module_path:
        from pathlib import Path

        module_path = tuple(Path(p) for p in args.module_path)
    return CheckOptions(
        ngpu=args.ngpu,
        allow_import=args.allow_import,
        module_path=module_path,
        extensions=tuple(args.extension),
        era=args.era,
    )


def _as_registry(result, *, path: str, shown: str, options, target: str = "titan") -> list:
    """``--as-registry``: the migrated config's own findings, for a file with no errors."""
    from titan.schemas.diagnostics import Severity

    if any(d.severity is Severity.ERROR for d in result.diagnostics):
        return []
    from titan.cli.validate_migrated import registry_findings

    return registry_findings(path, shown, result, options, target=target)


def _export_schema(target: str, *, options, stderr: TextIO) -> None:
    from titan.cli.output import write_text
    from titan.schemas.extension_reader import ExtensionError
    from titan.schemas.json_schema import json_schema_text
    from titan.schemas.merged_extensions import load_extension, merged_schema

    spec = None
    if options.extensions:
        from pathlib import Path

        dirs = [*options.module_path, Path.cwd()]
        try:
            found = [
                load_extension(
                    name, search_dirs=dirs, allow_import=options.allow_import, from_toml=False
                )
                for name in options.extensions
            ]
        except ExtensionError as error:
            raise UsageError(str(error)) from None
        spec = merged_schema(found)
    write_text(target, text=json_schema_text(spec))
    say(f"{PROG}: wrote JSON Schema to {target}", stream=stderr)


def main() -> None:
    """Console script entry point."""
    code = console(run, prog=PROG)
    if _only_titan_ran and _nothing_to_run_at_exit():
        # Tearing the interpreter down (freeing every module and object one by one) costs an
        # eighth of a whole run, and after a check only titan's own objects are left: nothing
        # is waiting to be written or closed once the streams are flushed (``console`` did).
        # So exit like mypy does; a run that imported user code (--allow-import) exits normally.
        os._exit(code)
    left = _user_threads()
    if left:  # registry code started threads that would keep the process waiting, silently
        say(
            f"{PROG}: note: not waiting for {len(left)} thread(s) the checked code started "
            f"({', '.join(t.name for t in left[:3])})",
            stream=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


def _user_threads() -> list:
    """Threads other than the main one that the interpreter would wait for at exit."""
    if "threading" not in sys.modules:
        return []
    import threading

    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _nothing_to_run_at_exit() -> bool:
    """True when no ``atexit`` handler is registered (``os._exit`` would skip them)."""
    import atexit

    count = getattr(atexit, "_ncallbacks", None)  # CPython; elsewhere assume there is something
    return count is not None and count() == 0


if __name__ == "__main__":
    main()
