"""``titan-validate``: every problem of legacy TOML job configs in one pass, CI-ready.

Exit codes: 0 clean (warnings allowed unless ``--strict``), 1 findings, 2 usage or internal error.

The flags are parsed with argparse rather than tyro: this command runs in pre-commit hooks on every
commit and must start in tens of milliseconds, and tyro alone costs more than that to import. For
the same reason nothing heavy is imported at module level: the checker, the renderers, ``pathlib``
and even ``argparse`` are imported on the paths that need them (see ``_parse_common``). A mode
with heavy dependencies (a registry ``--config`` check) should branch off in ``run`` before the
TOML path and import its modules there.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from titan import __version__

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Sequence
    from pathlib import Path
    from typing import TextIO

# Names of TOML files that are never torchtitan jobs when met while walking a directory.
NOT_JOB_TOMLS = frozenset(
    {
        "pyproject.toml",
        ".taplo.toml",
        "taplo.toml",
        "Cargo.toml",
        "ruff.toml",
        ".ruff.toml",
        "poetry.lock",
        "uv.lock",
        "pixi.toml",
        ".pre-commit-config.toml",
        "rustfmt.toml",
    }
)
SKIPPED_DIRS = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache"}
)


_only_titan_ran = False
"""Set once a check that ran no user code (no ``--allow-import``) is done; see ``main``."""


class UsageError(Exception):
    """A mistake in the command line; reported with exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (help, version, errors and every spelling argparse accepts)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="titan-validate",
        description="Check legacy torchtitan TOML job configs: syntax, unknown keys (with "
        "did-you-mean), types, deprecations and cross-field rules, all in one pass.",
        epilog="Exit status: 0 clean, 1 findings (warnings only with --strict), 2 usage or internal error.",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="TOML files, or directories searched recursively for *.toml job configs",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json", "github", "sarif"),
        default="text",
        help="output format (default: text)",
    )
    parser.add_argument("--strict", action="store_true", help="warnings fail the run too")
    parser.add_argument(
        "--ngpu",
        type=_positive_int,
        metavar="N",
        help="check parallel degrees against a world size of N GPUs",
    )
    parser.add_argument(
        "--allow-import",
        action="store_true",
        help="import custom_config_module modules instead of reading their source",
    )
    parser.add_argument(
        "--module-path",
        action="append",
        default=[],
        metavar="DIR",
        type=Path,
        help="extra directory to search for custom config modules (repeatable)",
    )
    parser.add_argument(
        "--extension",
        action="append",
        default=[],
        metavar="NAME",
        help="merge a custom config module the TOML relies on without declaring it: a built-in name (flux, ft, vlm, transformers_modeling_backend, simple_fsdp, compiler_toolkit, autoparallel) or a module path (repeatable)",
    )
    parser.add_argument(
        "--export-json-schema",
        metavar="FILE",
        type=Path,
        help="write the JSON Schema of the legacy format (with --extension sections) to FILE",
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        type=Path,
        help="write the report to FILE instead of standard output",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour in text output (default: auto)",
    )
    parser.add_argument(
        "--as-registry",
        action="store_true",
        help="also migrate each TOML in memory and check the Trainer.Config it becomes "
        "(titan's registry-side checks; imports titan's config classes)",
    )
    registry = parser.add_argument_group(
        "registry configs",
        "titan-validate --config NAME [--module M] [--registry FILE] [--ngpu N] "
        "[--section.field VALUE ...]: run a config_registry.py function and check the "
        "Trainer.Config it returns (field types and the same cross-field rules); "
        "--config NAME --help lists every --section.field override",
    )
    registry.add_argument("--config", metavar="NAME", help="registry function to check")
    registry.add_argument(
        "--module", metavar="M", help="look only in this model family (or module)"
    )
    registry.add_argument(
        "--registry", metavar="FILE", help="registry file searched before ./config_registry.py"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _Args:
    """What ``_parse_common`` returns: the attributes of argparse's namespace, same defaults."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.format = "text"
        self.strict = False
        self.ngpu: int | None = None
        self.allow_import = False
        self.module_path: list[Path] = []
        self.extension: list[str] = []
        self.export_json_schema: Path | None = None
        self.output: Path | None = None
        self.color = "auto"
        self.as_registry = False


_SWITCHES = {
    "--strict": "strict",
    "--allow-import": "allow_import",
    "--as-registry": "as_registry",
}
_CHOICES = {"--format": ("text", "json", "github", "sarif"), "--color": ("auto", "always", "never")}
_PATHS = {"--output": "output", "-o": "output", "--export-json-schema": "export_json_schema"}


def _parse_common(argv: Sequence[str]) -> _Args | None:
    """argparse's answer for the plain command lines hooks and CI use, without argparse.

    Importing argparse costs more than checking a whole corpus (it pulls in gettext, locale and
    shutil with its compressors), and every run needs its flags parsed. So this reads exact
    option names, each followed by its value (or ``--name=value``), and one run of paths, and
    returns ``None`` for anything else (help, version, abbreviations, ``--``, values that look
    like options, bad values): ``build_parser`` then parses the line and reports as it always did.
    """
    args = _Args()
    paths_done = False  # argparse takes one run of paths; a path after option after path fails
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-"):
            if paths_done:
                return None
            args.paths.append(arg)
            if i < len(argv) and argv[i].startswith("-"):
                paths_done = True
            continue
        if arg in _SWITCHES:
            setattr(args, _SWITCHES[arg], True)
            continue
        name, equals, value = arg.partition("=")
        if not equals:
            if i == len(argv):
                return None
            value = argv[i]
            i += 1
        elif not name.startswith("--"):
            return None
        if not value or value.startswith("-"):
            return None
        if name in _CHOICES:
            if value not in _CHOICES[name]:
                return None
            setattr(args, name[2:], value)
        elif name == "--ngpu":
            try:
                args.ngpu = int(value)
            except ValueError:
                return None
            if args.ngpu < 1:
                return None
        elif name == "--extension":
            args.extension.append(value)
        elif name in _PATHS or name == "--module-path":
            from pathlib import Path

            if name == "--module-path":
                args.module_path.append(Path(value))
            else:
                setattr(args, _PATHS[name], Path(value))
        else:
            return None
    return args


def discover(paths: Sequence[str]) -> Iterator[tuple[Path, str]]:
    """Files to check, with the name to show: named files as given, directories walked."""
    from pathlib import Path

    for path, shown in _discover(paths):
        yield Path(path), shown


def _discover(paths: Sequence[str]) -> Iterator[tuple[str, str]]:
    # ``discover`` with the paths as strings: pathlib is too slow to import for a pre-commit hook.
    # Names are spelt and sorted exactly as pathlib does (``a//./b/`` is ``a/b``, and ``a/b``
    # sorts before ``a-c`` because paths compare by component), so the report does not change.
    if os.name != "posix":  # drives and both separators: leave the spelling to pathlib itself
        from pathlib import Path

        for name in paths:
            path = Path(name)
            if not path.is_dir():
                yield str(path), name
                continue
            found = [Path(root) / f for root, files in _walk(path) for f in files]
            yield from ((str(file), str(file)) for file in sorted(found))
        return
    for name in paths:
        path = _posix_path(name)
        if not _is_dir(path):
            yield path, name
            continue
        found = [_posix_path(os.path.join(root, f)) for root, files in _walk(path) for f in files]
        yield from ((file, file) for file in sorted(found, key=lambda text: text.split("/")))


def _walk(top: str | os.PathLike[str]) -> Iterator[tuple[str, list[str]]]:
    """Each directory under ``top`` with its TOML job files (tool configs and hidden dirs skipped)."""
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        yield root, [f for f in files if f.endswith(".toml") and f not in NOT_JOB_TOMLS]


def _posix_path(name: str) -> str:
    """``str(pathlib.PurePosixPath(name))``: empty and ``.`` parts dropped, ``//`` kept as a root."""
    stripped = name.lstrip("/")
    root = "//" if len(name) - len(stripped) == 2 else "/" if stripped != name else ""
    return root + "/".join(part for part in stripped.split("/") if part and part != ".") or "."


def _is_dir(path: str) -> bool:
    """``pathlib.Path(path).is_dir()``: missing paths are not directories, other errors raise."""
    import errno
    import stat

    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            raise
        return False
    except ValueError:
        return False


def run(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """The whole command; returns the exit code (``main`` exits with it)."""
    global _only_titan_ran
    _only_titan_ran = False
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    # ``--config`` (a registry function) imports titan's config tree, tyro and pydantic; it
    # branches off here so the TOML path below stays as lean as it is.
    if any(arg == "--config" or arg.startswith("--config=") for arg in argv):
        return _guarded(lambda: _validate_config(argv, stdout, stderr), stderr)
    args = _parse_common(argv)
    if args is None:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exit_:
            return 0 if exit_.code == 0 else 2
    return _guarded(lambda: _validate(args, stdout, stderr), stderr)


def _validate_config(argv: list[str], stdout: TextIO, stderr: TextIO) -> int:
    from titan.cli import validate_config

    return validate_config.run(argv, stdout=stdout, stderr=stderr)


def _guarded(mode, stderr: TextIO) -> int:
    """Run a mode, turning usage errors and internal bugs into a message and exit code 2."""
    try:
        return mode()
    except UsageError as error:
        stderr.write(f"titan-validate: error: {error}\n")
        return 2
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        stderr.write("titan-validate: interrupted\n")
        return 2
    except Exception as error:  # an internal bug: say so, without a wall of traceback
        if os.environ.get("TITAN_DEBUG"):
            raise
        stderr.write(
            f"titan-validate: internal error: {type(error).__name__}: {error}\n"
            "This is a bug in titan; rerun with TITAN_DEBUG=1 for the traceback and report it.\n"
        )
        return 2


def _validate(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from schemas.toml_check import CheckOptions, check_file

    if not args.paths and args.export_json_schema is None:
        raise UsageError(
            "nothing to do: give TOML files or directories (or --export-json-schema FILE)"
        )
    options = CheckOptions(
        ngpu=args.ngpu,
        allow_import=args.allow_import,
        module_path=tuple(args.module_path),
        extensions=tuple(args.extension),
    )
    if args.export_json_schema is not None:
        _export_schema(args.export_json_schema, options, stderr)
        if not args.paths:
            return 0

    files = list(_discover(args.paths))
    if not files:
        stderr.write(
            f"titan-validate: warning: no TOML files found under {', '.join(args.paths)}\n"
        )
    diagnostics, sources = [], {}
    for path, shown in files:
        result = check_file(path, options, shown=shown)
        diagnostics += result.diagnostics
        if args.as_registry and result.document is not None:
            from schemas.diagnostics import Severity

            if not any(d.severity is Severity.ERROR for d in result.diagnostics):
                from titan.cli.validate_migrated import registry_findings

                diagnostics += registry_findings(path, shown, result, options)
        if result.text is not None:
            sources[shown] = result.text
    _render(args, diagnostics, sources, len(files), stdout)
    global _only_titan_ran
    _only_titan_ran = not args.allow_import  # user modules imported: let them shut down
    return exit_code(diagnostics, strict=args.strict)


def exit_code(diagnostics, *, strict: bool) -> int:
    """1 when there are errors (or warnings under ``--strict``), else 0."""
    from schemas.diagnostics import Severity

    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return 1 if any(d.severity in failing for d in diagnostics) else 0


def _render(args: argparse.Namespace, diagnostics, sources, files: int, stdout: TextIO) -> None:
    from schemas import render

    out = stdout
    if args.output is not None:
        try:
            out = args.output.open("w", encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
    try:
        if args.format == "json":
            render.render_json(diagnostics, files=files, out=out)
        elif args.format == "github":
            render.render_github(diagnostics, files=files, out=out)
        elif args.format == "sarif":
            render.render_sarif(diagnostics, files=files, out=out, version=__version__)
        else:
            color = {"always": True, "never": False}.get(args.color)
            if color is None and (out is not stdout or os.environ.get("NO_COLOR")):
                color = False
            render.render_text(diagnostics, files=files, out=out, sources=sources, color=color)
    finally:
        if out is not stdout:
            out.close()


def _export_schema(target: Path, options, stderr: TextIO) -> None:
    from schemas.extension_reader import ExtensionError
    from schemas.json_schema import write_json_schema
    from schemas.toml_check import load_extension, merged_schema

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
    try:
        write_json_schema(target, spec)
    except OSError as error:
        raise UsageError(f"cannot write {target}: {error.strerror or error}") from None
    stderr.write(f"titan-validate: wrote JSON Schema to {target}\n")


def main() -> None:
    """Console script entry point."""
    try:
        code = run()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`titan-validate ... | head`): not our error, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    else:
        if _only_titan_ran and _nothing_to_run_at_exit():
            # Tearing the interpreter down (freeing every module and object one by one) costs
            # an eighth of a whole run, and after a check only titan's own objects are left:
            # nothing is waiting to be written or closed once the streams are flushed. So exit
            # like mypy does; a run that imported user code (--allow-import) exits normally.
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                raise SystemExit(code) from None
            os._exit(code)
    raise SystemExit(code)


def _nothing_to_run_at_exit() -> bool:
    """True when no ``atexit`` handler is registered (``os._exit`` would skip them)."""
    import atexit

    count = getattr(atexit, "_ncallbacks", None)  # CPython; elsewhere assume there is something
    return count is not None and count() == 0


if __name__ == "__main__":
    main()
