"""titan-migrate's command line: the argparse parser and the types of its flags' values.

Legacy command-line overrides (what follows ``--``) are cut off before this parser sees the
line (``titan.cli.migrate``): they are the old loader's flags, not titan-migrate's.
"""

from __future__ import annotations

import argparse

from titan import __version__
from titan.cli import era_option, report
from titan.cli.exits import EXIT_STATUS_HELP

PROG = "titan-migrate"


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (help, errors and every spelling argparse accepts)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Migrate legacy torchtitan TOML configs to a Python config_registry.py: "
        "lossless, or every loss reported.",
        epilog="Legacy command-line overrides go after `--`, as the old loader took them: "
        "titan-migrate x.toml -- --training.steps 5 --checkpoint.enable. Exit status: 0 migrated, "
        "1 errors (or --strict/--check failing, or a folder's module refused), 2 usage, "
        f"{EXIT_STATUS_HELP}.",
    )
    parser.add_argument(
        "files",
        nargs="+",
        metavar="PATH",
        help="legacy TOML configs, Forge app configs (*.yaml, *.yml: their trainer: block), or "
        "folders searched recursively for TOMLs (one module per folder of TOMLs, written "
        "beside them unless -o or --out-dir says otherwise)",
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write one module here (never over an input)"
    )
    parser.add_argument(
        "--scaffold-extension",
        action="store_true",
        help="instead of migrating: write the extension module that declares the fork's own "
        "sections and keys found in the TOMLs (to stdout, or -o FILE: an existing module "
        "there only gains what it lacks, every other line kept); declare it in "
        'pyproject.toml with [tool.titan] extensions = ["fork_ext.py"]',
    )
    parser.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write one config_registry.py per folder of TOMLs under DIR, mirroring the "
        "folders below the one the inputs share",
    )
    parser.add_argument(
        "--check",
        metavar="FILE",
        help="exit 1 if FILE is not exactly what migrate produces now (for CI)",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="print a unified diff against the -o/--check file instead of writing it",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 unless every key is carried over"
    )
    parser.add_argument(
        "--fix-stale-names",
        action="store_true",
        help='map stale converter names (v0.1 "float8") to their v0.2.2 names',
    )
    parser.add_argument("--era", type=era_option.era, metavar="YYYY-MM", help=era_option.HELP)
    parser.add_argument(
        "--format",
        choices=report.FORMATS,
        default="text",
        help="report format (text: summary and findings; json: every key's outcome too)",
    )
    parser.add_argument("--color", choices=report.COLORS, default="auto")
    parser.add_argument(
        "--allow-import",
        action="store_true",
        help="import custom config modules instead of reading their source",
    )
    parser.add_argument(
        "--module-path",
        action="append",
        default=[],
        metavar="DIR",
        help="extra directory to search for custom config modules",
    )
    parser.add_argument(
        "--extension",
        action="append",
        default=[],
        metavar="NAME",
        help="merge a custom config module the TOML relies on without declaring it: a built-in "
        "name (flux, ft, vlm, transformers_modeling_backend, simple_fsdp, compiler_toolkit, "
        "autoparallel) or a module path (repeatable)",
    )
    parser.add_argument(
        "--model-registry",
        action="append",
        default=[],
        type=_model_registry,
        metavar="NAME=MODULE",
        help="a model family titan does not ship: model.name NAME migrates to "
        "MODULE.model_registry(flavor) (repeatable; also [tool.titan] model-registries in "
        "pyproject.toml)",
    )
    parser.add_argument(
        "--target",
        default="titan",
        type=_target,
        metavar="TRAINER",
        help="the trainer the code is written for: titan (default) or torchtitan==0.3.0 "
        "(upstream torchtitan's registry; what 0.3.0 cannot express is reported)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a module titan-migrate wrote even if it was edited since or is read-only "
        "(never an input, nor a file titan-migrate did not write)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="report errors only")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _target(text: str) -> str:
    """``--target``: a trainer name ``titan.migrate.targets.choice`` knows."""
    from titan.migrate.targets.choice import resolve

    return resolve(text)


def _model_registry(text: str) -> tuple[str, str]:
    """``--model-registry NAME=package.module``."""
    import re

    name, equals, module = text.partition("=")
    parts = module.split(".")
    if (
        not equals
        or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name)
        or not all(p.isidentifier() for p in parts)
    ):
        raise argparse.ArgumentTypeError(
            f"expected NAME=package.module (a model.name and an importable module), got {text!r}"
        )
    return name, module
