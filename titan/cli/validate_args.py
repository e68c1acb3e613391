"""titan-validate's command line: the full argparse parser, and a fast path for the common lines.

The flags are parsed with argparse rather than tyro: this command runs in pre-commit hooks on every
commit and must start in tens of milliseconds, and tyro alone costs more than that to import.
Importing argparse itself costs more than checking a whole corpus (it pulls in gettext, locale
and shutil with its compressors), so :func:`parse_common` reads the plain command lines hooks and
CI use without it, and :func:`build_parser` is built only for anything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from titan import __version__
from titan.cli import era_option
from titan.cli.exits import EXIT_STATUS_HELP
from titan.cli.report import COLORS, FORMATS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (help, version, errors and every spelling argparse accepts)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="titan-validate",
        description="Check legacy torchtitan TOML job configs and config_registry.py modules: "
        "syntax, unknown keys (with did-you-mean), types, deprecations and cross-field rules, "
        "all in one pass.",
        epilog="Exit status: 0 clean, 1 findings (warnings only with --strict), 2 usage or "
        f"internal error, {EXIT_STATUS_HELP}.",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="TOML job configs, Forge app configs (*.yaml, *.yml: the legacy sections under "
        "their trainer: key), registry modules (*.py), or directories searched recursively "
        "for *.toml job configs and config_registry.py modules (and the registry files a "
        "pyproject.toml declares under [tool.titan] registry-files; never *.yaml: name those)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="output format (default: text)"
    )
    parser.add_argument("--strict", action="store_true", help="warnings fail the run too")
    parser.add_argument(
        "--ngpu",
        type=_positive_int,
        metavar="N",
        help="check parallel degrees against a world size of N GPUs",
    )
    parser.add_argument("--era", type=era_option.era, metavar="YYYY-MM", help=era_option.HELP)
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
        help="folder to search for custom config modules, and first on Python's path for the "
        "modules that registry files and migrated configs import (repeatable)",
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
        help="write the JSON Schema of the legacy format (with --extension sections) to FILE",
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write the report to FILE instead of standard output (never over an input)",
    )
    parser.add_argument(
        "--color", choices=COLORS, default="auto", help="colour in text output (default: auto)"
    )
    parser.add_argument(
        "--fix",
        action="store_true",
        help="rewrite each TOML in place: keys of older torchtitan eras moved to their v0.2.2 "
        "form, stale converter names renamed, a lone string made a list where one is wanted; "
        "comments and formatting elsewhere are kept byte for byte; then report what remains",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="print what --fix would change as a unified diff and write nothing "
        "(exit 1 when something would change)",
    )
    parser.add_argument(
        "--as-registry",
        action="store_true",
        help="also migrate each TOML in memory and check the Trainer.Config it becomes "
        "(titan's registry-side checks; imports titan's config classes)",
    )
    parser.add_argument(
        "--target",
        default="titan",
        type=_target,
        metavar="TRAINER",
        help="with --as-registry: the trainer the TOML is migrated for: titan (default) or "
        "torchtitan==0.3.0, which reports what upstream 0.3.0 cannot express or does otherwise",
    )
    modules = parser.add_argument_group(
        "registry modules",
        "A .py path is a registry module: it is imported (as titan-train --registry imports it) "
        "and every function returning a Trainer.Config is called and checked like --config "
        "checks one. Results are cached by file content in the user cache folder.",
    )
    modules.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="FUNC",
        help="check only these registry functions (names or shell patterns such as 'llama3_*'; "
        "repeatable or comma-separated)",
    )
    modules.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long importing a registry module, or one registry function, may take before "
        "it is reported (default: 60)",
    )
    modules.add_argument(
        "--memory-limit",
        type=_memory_size,
        default=None,
        metavar="SIZE",
        help="most memory (address space) the process that runs registry modules may use, such "
        "as 4GiB or 512MiB; past it the module is reported (default: no limit)",
    )
    modules.add_argument(
        "--python",
        default=None,
        metavar="PATH",
        help="an interpreter where upstream torchtitan is installed (such as "
        ".venv-upstream/bin/python): registry modules written for upstream torchtitan are also "
        "built there, in titan's sandboxed child process, and what they build is checked "
        "(default: [tool.titan] upstream-python, else the static check alone)",
    )
    modules.add_argument(
        "--no-cache",
        action="store_true",
        help="check registry modules afresh, neither reading nor writing the cache",
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


def _ascii_whole(text: str) -> bool:
    """Whether ``text`` is a whole number in the ASCII digits 0-9 (spaces around allowed)."""
    digits = text.strip()
    return digits.isascii() and digits.isdigit()


def _positive_int(text: str) -> int:
    import argparse

    if not _ascii_whole(text):  # int() would take other scripts' digits and `8_0` too
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


MAX_SECONDS = 86400.0
"""The longest ``--timeout``: a day for one import or one registry function."""


def seconds(text: str) -> float | None:
    """``--timeout``: a positive, finite number of seconds up to :data:`MAX_SECONDS`, else
    ``None`` (``inf``, ``nan``, ``0``, ``-1``, ``1e308`` and words are not)."""
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if 0 < value <= MAX_SECONDS else None


def positive_seconds(text: str) -> float:
    """argparse's type for ``--timeout`` (see :func:`seconds`)."""
    import argparse

    value = seconds(text)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds up to {MAX_SECONDS:g} (a day), got {text!r}"
        )
    return value


def _memory_size(text: str) -> int:
    """``--memory-limit``: a size in bytes, KiB/MiB/GiB/TiB (or K/M/G/T), KB/MB/GB/TB."""
    import argparse

    from titan.cli.registry_errors import memory_bytes

    value = memory_bytes(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 4GiB or 512MiB, got {text!r}")
    if value > MAX_MEMORY:
        raise argparse.ArgumentTypeError(
            f"{text} is more than any address space (at most {MAX_MEMORY // 1024**5} PiB); "
            "leave --memory-limit out for no limit"
        )
    return value


MAX_MEMORY = 2**50 * 64
"""The largest ``--memory-limit`` (64 PiB, beyond what a 64-bit address space gives)."""


class Args:
    """What :func:`parse_common` returns: the attributes of argparse's namespace, same defaults."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.format = "text"
        self.strict = False
        self.ngpu: int | None = None
        self.era: str | None = None
        self.allow_import = False
        self.module_path: list[str] = []
        self.extension: list[str] = []
        self.export_json_schema: str | None = None
        self.output: str | None = None
        self.color = "auto"
        self.as_registry = False
        self.select: list[str] = []
        self.no_cache = False
        self.timeout = 60.0
        self.memory_limit: int | None = None
        self.python: str | None = None
        self.fix = False
        self.diff = False
        self.target = "titan"


_SWITCHES = {
    "--strict": "strict",
    "--allow-import": "allow_import",
    "--as-registry": "as_registry",
    "--no-cache": "no_cache",
    "--fix": "fix",
    "--diff": "diff",
}
_CHOICES = {"--format": FORMATS, "--color": COLORS}
_VALUES = {
    "--output": "output",
    "-o": "output",
    "--export-json-schema": "export_json_schema",
    "--python": "python",
}
_LISTS = {"--module-path": "module_path", "--extension": "extension", "--select": "select"}


def parse_common(argv: Sequence[str]) -> Args | None:
    """argparse's answer for the plain command lines hooks and CI use, without argparse.

    This reads exact option names, each followed by its value (or ``--name=value``), and one run
    of paths, and returns ``None`` for anything else (help, version, abbreviations, ``--``,
    values that look like options, bad values): :func:`build_parser` then parses the line and
    reports as it always did.
    """
    args = Args()
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
            if not _ascii_whole(value):
                return None
            args.ngpu = int(value)
            if args.ngpu < 1:
                return None
        elif name == "--era":
            if not era_option.is_era(value):
                return None
            args.era = value.strip()
        elif name == "--timeout":
            args.timeout = seconds(value)
            if args.timeout is None:
                return None
        elif name == "--memory-limit":
            from titan.cli.registry_errors import memory_bytes

            args.memory_limit = memory_bytes(value)
            if args.memory_limit is None or args.memory_limit > MAX_MEMORY:
                return None
        elif name == "--target":
            from titan.migrate.targets.choice import UnknownTarget, resolve

            try:
                args.target = resolve(value)
            except UnknownTarget:
                return None
        elif name in _LISTS:
            getattr(args, _LISTS[name]).append(value)
        elif name in _VALUES:
            setattr(args, _VALUES[name], value)
        else:
            return None
    return args


def _target(text: str) -> str:
    """``--target``: a trainer name ``titan.migrate.targets.choice`` knows."""
    from titan.migrate.targets.choice import resolve

    return resolve(text)
