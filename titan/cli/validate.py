"""``titan-validate``: every problem of legacy TOML job configs in one pass, CI-ready.

Exit codes: 0 clean (warnings allowed unless ``--strict``), 1 findings, 2 usage or internal error.

The flags are parsed with argparse rather than tyro: this command runs in pre-commit hooks on every
commit and must start in tens of milliseconds, and tyro alone costs more than that to import.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from titan import __version__

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


class UsageError(Exception):
    """A mistake in the command line; reported with exit code 2."""


def build_parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def discover(paths: Sequence[str]) -> Iterator[tuple[Path, str]]:
    """Files to check, with the name to show: named files as given, directories walked."""
    for name in paths:
        path = Path(name)
        if not path.is_dir():
            yield path, name
            continue
        found = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
            found += [
                Path(root) / f for f in files if f.endswith(".toml") and f not in NOT_JOB_TOMLS
            ]
        for file in sorted(found):
            yield file, str(file)


def run(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """The whole command; returns the exit code (``main`` exits with it)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 0 if exit_.code == 0 else 2
    try:
        return _validate(args, stdout, stderr)
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

    files = list(discover(args.paths))
    if not files:
        stderr.write(
            f"titan-validate: warning: no TOML files found under {', '.join(args.paths)}\n"
        )
    diagnostics, sources = [], {}
    for path, shown in files:
        result = check_file(path, options, shown=shown)
        diagnostics += result.diagnostics
        if result.text is not None:
            sources[shown] = result.text
    _render(args, diagnostics, sources, len(files), stdout)
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
    raise SystemExit(code)


if __name__ == "__main__":
    main()
