"""``titan-diff A B``: the fields in which two configs differ, one line per field.

Each operand is one of:

- a registry function name (``llama3_debugmodel``), looked up as ``titan-train --config`` does
  (``./config_registry.py``, then titan's built-in registries);
- ``MODULE:function``: ``MODULE`` is a family (``llama3``), ``package.module`` or
  ``path/to/file.py``, as ``--module`` takes it;
- a dump written by ``titan.config.serialize.to_json`` / ``to_toml`` (a ``__class__`` tag at the
  root);
- ``file.py:function`` of a module written for upstream torchtitan 0.3.0: read statically, as
  ``titan-validate`` reads it (every field, with 0.3.0's defaults), and compared with another
  such function;
- a legacy TOML job config (no ``__class__`` tag). Two legacy TOMLs are compared by their
  effective values (the file over the v0.2.2 defaults and its ``custom_config_module``); turning a
  legacy TOML into a registry config is ``titan-migrate``'s job, so mixing the two kinds is refused.

Exit codes: 0 no difference, 1 differences, 2 usage error (no traceback for user mistakes), and
the codes every command shares (``titan.cli.exits``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from titan import __version__
from titan.cli import registry, report
from titan.cli.console import console
from titan.cli.exits import EXIT_STATUS_HELP, UsageError, guarded
from titan.cli.module_path import HELP as MODULE_PATH_HELP
from titan.cli.module_path import importable
from titan.cli.streams import wants_color

PROG = "titan-diff"


@dataclasses.dataclass(slots=True, kw_only=True)
class Operand:
    """One side of the comparison, loaded."""

    label: str
    """How the user named it."""
    config: Any = None
    """The config object (registry function, module function or dump)."""
    legacy: dict[str, Any] | None = None
    """Effective legacy values by dotted key, for a legacy TOML."""
    path: Path | None = None
    """The legacy TOML's path (migrated when compared with a registry config)."""
    extensions: tuple[str, ...] = ()
    """``--extension`` modules merged into a legacy TOML's schema."""
    module_path: tuple[str, ...] = ()
    """``--module-path`` folders searched for a legacy TOML's custom config module."""
    upstream: dict[str, Any] | None = None
    """Every field by dotted path, for a function written for upstream torchtitan (read
    statically)."""

    def describe(self) -> str:
        """The header text: the name as given and what kind of config it is."""
        if self.legacy is not None:
            return f"{self.label} (legacy TOML)"
        if self.upstream is not None:
            return f"{self.label} (torchtitan 0.3.0 Trainer.Config, read statically)"
        return f"{self.label} ({type(self.config).__qualname__})"


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print the fields in which two configs differ. A and B are registry function "
        "names, module:function or file.py:function, JSON/TOML dumps, or two legacy TOML files.",
        epilog=f"Exit status: 0 no difference, 1 differences, 2 usage error, {EXIT_STATUS_HELP}.",
    )
    parser.add_argument("a", metavar="A", help="the left config")
    parser.add_argument("b", metavar="B", help="the right config")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--allow-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="also load classes of MODULE from a dump (titan's own are always allowed)",
    )
    parser.add_argument(
        "--extension",
        action="append",
        default=[],
        metavar="NAME",
        help="merge a custom config module a legacy TOML relies on without declaring it: a "
        "built-in name (flux, ft, vlm, transformers_modeling_backend, simple_fsdp, "
        "compiler_toolkit, autoparallel) or a module path (repeatable)",
    )
    parser.add_argument(
        "--module-path", action="append", default=[], metavar="DIR", help=MODULE_PATH_HELP
    )
    parser.add_argument(
        "--target",
        default="titan",
        type=_target,
        metavar="TRAINER",
        help="compare two legacy TOMLs as the configs they migrate to for this trainer: "
        "torchtitan==0.3.0 shows what differs between them on upstream torchtitan 0.3.0 "
        "(default: titan, which compares their legacy values)",
    )
    parser.add_argument(
        "--allow-import",
        action="store_true",
        help="import the project's own code a legacy TOML's migrated config needs (a declared "
        "model family's package, a declared converter's class); without it titan-diff refuses "
        "to build such a config",
    )
    parser.add_argument("--color", choices=report.COLORS, default="auto")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _target(text: str) -> str:
    from titan.migrate.targets.choice import resolve

    return resolve(text)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-diff`` console script; returns the exit code."""
    return console(run, argv=argv, prog=PROG)


def run(argv: Sequence[str] | None, *, stdout: TextIO, stderr: TextIO) -> int:
    """The command with its streams passed in; returns the exit code."""
    return guarded(lambda: _run(argv, stdout, stderr), prog=PROG, stdout=stdout, stderr=stderr)


def _run(argv: Sequence[str] | None, stdout: TextIO, stderr: TextIO | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse printed the problem (or --help)
        return 0 if exit_.code in (0, None) else 2
    from titan.cli import user_code

    # the JSON report is a list of differences: which user files ran goes to stderr either way
    user_code.start(prog=PROG, stream=stderr)
    extensions, folders = tuple(args.extension), tuple(args.module_path)
    before = set(sys.modules)  # a dump's --allow-module classes are the user's code too
    with importable(folders):  # registry operands and the models they call
        left, right = (
            load(
                operand,
                allowed_modules=args.allow_module,
                extensions=extensions,
                module_path=folders,
            )
            for operand in (args.a, args.b)
        )
        if args.target != "titan":
            differences = compare_for_target(left, right, args.target)
        else:
            differences = compare(left, right, allow_import=args.allow_import)
    user_code.record_modules(before)
    if args.format == "json":
        text = json.dumps([_as_json(d) for d in differences], indent=2) + "\n"
    else:
        color = wants_color(args.color, out=stdout)
        text = render_text(left, right, differences, color=color)
    report.deliver(text, output=None, stream=stdout)
    return 1 if differences else 0


def compare(left: Operand, right: Operand, *, allow_import: bool = False) -> list:
    """The differences between two loaded operands; ``allow_import`` lets a legacy TOML's
    migrated config import the project's own code it needs."""
    from titan.config.serialize import diff

    if left.legacy is not None and right.legacy is not None:
        return legacy_diff(left.legacy, right.legacy)
    if left.upstream is not None or right.upstream is not None:
        if left.upstream is None or right.upstream is None:
            raise UsageError(
                "a function written for upstream torchtitan is compared with another such "
                "function (file.py:function), not with a titan config or a TOML"
            )
        return _leaves_diff(left.upstream, right.upstream)
    return diff(_config(left, allow_import), _config(right, allow_import))


def compare_for_target(left: Operand, right: Operand, target: str) -> list:
    """The differences between two legacy TOMLs as migrated for another trainer (whose classes
    are not installed beside titan): their plans' trees, field by field."""
    from titan.config.serialize import ABSENT, Difference, same

    for operand in (left, right):
        if operand.legacy is None:
            raise UsageError(
                f"--target {target} compares legacy TOMLs as migrated for it; {operand.label} "
                "is a titan config (compare the TOMLs it came from)"
            )
    a, b = (_target_leaves(_plan(o), target) for o in (left, right))
    keys = [*a, *(k for k in b if k not in a)]
    pairs = ((k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in keys)
    found = [Difference(k, x, y) for k, x, y in pairs if not same(x, y)]
    # a field whose class differs stands for everything below it
    replaced = [d.path + "." for d in found if isinstance(d.left, _Code) or d.left is ABSENT]
    return [d for d in found if not any(d.path.startswith(p) for p in replaced)]


def _leaves_diff(a: dict[str, Any], b: dict[str, Any]) -> list:
    """Field-by-field differences of two flattened configs; a field whose class differs stands
    for everything below it."""
    from titan.config.serialize import ABSENT, Difference, same

    keys = [*a, *(k for k in b if k not in a)]
    pairs = ((k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in keys)
    found = [Difference(k, x, y) for k, x, y in pairs if not same(x, y)]
    replaced = [d.path + "." for d in found if d.left is ABSENT or d.right is ABSENT]
    replaced += [
        d.path + "."
        for d in found
        if isinstance(d.left, str) and d.left.endswith("(...)") and type(d.left) is not str
    ]
    return [d for d in found if not any(d.path.startswith(p) for p in replaced)]


class _Code(str):
    """A value shown as the code that builds it (a class, a call), not as a string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _target_leaves(plan: Any, target: str) -> dict[str, Any]:
    """Dotted config path -> value of a plan retargeted for ``target``; a config object shows
    as its class at its own path, calls as their code."""
    from titan.migrate.targets.choice import converter
    from titan.migrate.targets.config_objects import Call, Local, Obj, RegistryCall, changed_fields

    plan = converter(target)(plan)
    leaves: dict[str, Any] = {}

    def code(value: Any) -> Any:
        if isinstance(value, Local):  # inside an expression: by its name, as the code reads
            return _Code(value.name)
        if isinstance(value, Obj):
            inner = ", ".join(f"{k}={code(v)!r}" for k, v in changed_fields(value).items())
            return _Code(f"{value.cls.rpartition(':')[2]}({inner})")
        if isinstance(value, RegistryCall | Call):
            name = "model_registry" if isinstance(value, RegistryCall) else value.name
            first = (value.flavor,) if isinstance(value, RegistryCall) else value.args
            args = [repr(code(v)) for v in first]
            args += [f"{k}={code(v)!r}" for k, v in value.kwargs.items()]
            return _Code(f"{name}({', '.join(args)})")
        if isinstance(value, list):
            return [code(v) for v in value]
        if isinstance(value, dict):
            return {k: code(v) for k, v in value.items()}
        return value

    def walk(obj: Any, prefix: str) -> None:
        leaves[prefix.rstrip(".") or "<root>"] = _Code(obj.cls.rpartition(":")[2])
        for name, value in obj.fields.items():
            if isinstance(value, Obj):
                walk(value, f"{prefix}{name}.")
            elif isinstance(value, Local):  # the field the local was made for: its value
                leaves[prefix + name] = code(plan.locals.get(value.name))
            else:
                leaves[prefix + name] = code(value)

    walk(plan.root, "")
    return leaves


def _plan(operand: Operand) -> Any:
    """The migration plan of a legacy TOML operand; ``UsageError`` when it has errors."""
    from titan.migrate.plan.build import build_plan
    from titan.schemas.toml_check import CheckOptions

    options = CheckOptions(
        extensions=operand.extensions, module_path=tuple(map(Path, operand.module_path))
    )
    plan = build_plan(operand.path, shown=operand.label, options=options)
    if plan.root is None or plan.errors():
        first = plan.errors()[0] if plan.errors() else None
        detail = f": {first.span}: {first.message}" if first is not None else ""
        hint = f"\n  hint: {first.hint}" if first is not None and first.hint else ""
        raise UsageError(
            f"{operand.label} cannot be migrated{detail} (run titan-migrate on it){hint}"
        )
    return plan


def _config(operand: Operand, allow_import: bool = False) -> Any:
    """A registry config as is; a legacy TOML as the config titan-migrate turns it into."""
    if operand.legacy is None:
        return operand.config
    from titan.cli import user_code

    try:
        return user_code.build(_plan(operand), allow_import=allow_import, toml=operand.path)
    except user_code.ImportNotAllowed as stop:
        modules = ", ".join(module for module, _ in stop.modules)
        raise UsageError(
            f"{operand.label}: {user_code.not_allowed_text(stop.modules, prog=PROG)}\n"
            f"  hint: pass --allow-import to let titan-diff import {modules}"
        ) from None
    except user_code.ImportFailed as stop:
        where = f"{stop.span}: " if stop.span is not None else f"{operand.label}: "
        raise UsageError(f"{where}{stop.message}\n  hint: {stop.hint}") from None


# ---------------------------------------------------------------------------------------------
# Loading operands


def load(
    operand: str,
    *,
    allowed_modules: Sequence[str] = (),
    extensions: tuple[str, ...] = (),
    module_path: tuple[str, ...] = (),
) -> Operand:
    """Load one operand (see the module docstring); ``UsageError`` for any user mistake.
    ``extensions`` are merged into a legacy TOML's schema, as ``--extension`` does, and its
    custom config module is also searched in the ``module_path`` folders."""
    path = Path(operand)
    if os.path.isdir(operand):
        raise UsageError(f"{operand} is a folder; name a config file or a registry function")
    if os.path.exists(operand) and path.suffix != ".py":
        return _load_file(path, operand, allowed_modules, extensions, module_path)
    head, sep, function = operand.rpartition(":")
    if sep and head and function:
        upstream = _upstream_operand(head, function, label=operand)
        if upstream is not None:
            return upstream
        return _registry_operand(function, module=head, label=operand)
    if path.suffix == ".py" and path.is_file():
        raise UsageError(f"{operand}: name the registry function too: {operand}:FUNCTION")
    if path.suffix in (".toml", ".json", ".py") or "/" in operand or os.sep in operand:
        raise UsageError(f"{operand}: no such file")
    return _registry_operand(operand, module=None, label=operand)


def _load_file(
    path: Path,
    shown: str,
    allowed_modules: Sequence[str],
    extensions: tuple[str, ...],
    module_path: tuple[str, ...] = (),
) -> Operand:
    from titan.config.serialize import CLASS_TAG, from_dict, from_toml
    from titan.schemas.toml_source import read_text, read_toml

    if path.suffix == ".json":
        text, problem = read_text(path, shown=shown)
        if text is None:
            raise UsageError(_problem(problem))
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            where = (
                f"{shown}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}"
                if isinstance(error, json.JSONDecodeError)
                else f"{shown}: JSON nested too deeply to read"
            )
            raise UsageError(where) from None
        if not (isinstance(data, dict) and CLASS_TAG in data):
            raise UsageError(f"{shown}: not a titan config dump (no __class__ tag at the root)")
        return Operand(label=shown, config=_rebuild(from_dict, data, shown, allowed_modules))
    source = read_toml(path, shown=shown)
    if source.problem is not None:
        raise UsageError(_problem(source.problem))
    if CLASS_TAG in source.document:
        rebuilt = _rebuild(from_toml, source.text, shown, allowed_modules)
        return Operand(label=shown, config=rebuilt)
    legacy = legacy_values(
        source.text, path=path, shown=shown, extensions=extensions, module_path=module_path
    )
    return Operand(
        label=shown, legacy=legacy, path=path, extensions=extensions, module_path=module_path
    )


def _problem(d) -> str:
    """A reader's finding as one message: ``file:line:col: message`` (no position for a file
    that could not be read at all), and its hint."""
    where = d.span.file if d.code == "unreadable-file" else str(d.span)
    hint = f"\n  hint: {d.hint}" if d.hint else ""
    return f"{where}: {d.message}{hint}"


def _rebuild(reader, data: Any, shown: str, allowed_modules: Sequence[str]) -> Any:
    try:
        return reader(data, allowed_modules=allowed_modules)
    except ValueError as error:
        raise UsageError(f"{shown}: {error}") from None
    except RecursionError:  # a JSON dump nested deeper than any config
        raise UsageError(f"{shown}: nested too deeply to be a titan config dump") from None


def _upstream_operand(head: str, function: str, *, label: str) -> Operand | None:
    """``file.py:function`` of a module written for upstream torchtitan: read statically
    (titan's environment has no torchtitan), every field with 0.3.0's defaults filled in."""
    if not head.endswith(".py") or not os.path.isfile(head):
        return None
    from titan.schemas.toml_source import read_text

    text, problem = read_text(head, shown=head)
    if text is None:
        raise UsageError(f"cannot read {head}: {problem.message}")
    if "torchtitan" not in text:
        return None
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    from titan.cli.validate_registry import _upstream_import

    if _upstream_import(tree) is None:
        return None
    from titan.migrate.registry_check import function_leaves

    leaves = function_leaves(text, path=head, name=function)
    if isinstance(leaves, str):
        raise UsageError(f"{label}: {leaves}")
    return Operand(label=label, upstream=leaves)


def _registry_operand(name: str, *, module: str | None, label: str) -> Operand:
    """A registry function, found and run as ``--config NAME [--module MODULE]`` would be."""
    from titan.config import manager

    try:
        return Operand(label=label, config=registry.lookup(name, module=module).config)
    except manager.RegistryError as error:
        where = f"{error.span}: " if error.span is not None else ""
        hint = f"\n  hint: {error.hint}" if error.hint else ""
        raise UsageError(f"{where}{error.message}{hint}") from None


# ---------------------------------------------------------------------------------------------
# Legacy TOMLs


def legacy_values(
    text: str,
    *,
    path: Path,
    shown: str,
    extensions: tuple[str, ...] = (),
    module_path: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Every effective value of a legacy TOML by dotted key: the file over the v0.2.2 defaults
    (and those of its custom config module and the ``extensions``).

    Keys the schema does not know are kept as written, so a typo shows up as a difference.
    """
    from titan.schemas.spec import MISSING, SectionSpec
    from titan.schemas.toml_check import CheckOptions, check_text

    options = CheckOptions(extensions=extensions, module_path=tuple(map(Path, module_path)))
    checked = check_text(text, file=shown, base_dir=path.resolve().parent, options=options)
    for finding in checked.diagnostics:
        if finding.code == "extension-error" and finding.path == "--extension":
            hint = f"\n  hint: {finding.hint}" if finding.hint else ""
            raise UsageError(f"--extension: {finding.message}{hint}")
    values: dict[str, Any] = {}

    def walk(table: dict[str, Any], section: SectionSpec | None, prefix: str) -> None:
        for field in section.fields if section is not None else ():
            written = table.get(field.name, MISSING)
            nested = isinstance(field.annotation, SectionSpec)
            if nested and (written is MISSING or isinstance(written, dict)):
                walk(
                    {} if written is MISSING else written,
                    field.annotation,
                    f"{prefix}{field.name}.",
                )
            elif written is not MISSING or field.default is not MISSING:
                values[prefix + field.name] = field.default if written is MISSING else written
        for key, value in table.items():
            if section is None or section.field(key) is None:
                if isinstance(value, dict):
                    walk(value, None, f"{prefix}{key}.")
                else:
                    values[prefix + key] = value

    walk(checked.document or {}, checked.schema, "")
    return values


def legacy_diff(left: dict[str, Any], right: dict[str, Any]) -> list:
    """The legacy keys whose effective values differ (typed: ``1`` is not ``1.0``)."""
    from titan.config.serialize import ABSENT, Difference, same

    keys = [*left, *(k for k in right if k not in left)]
    pairs = ((k, left.get(k, ABSENT), right.get(k, ABSENT)) for k in keys)
    return [Difference(k, a, b) for k, a, b in pairs if not same(a, b)]


# ---------------------------------------------------------------------------------------------
# Output


def _show(value: Any) -> str:
    return value.__qualname__ if isinstance(value, type) else repr(value)


def render_text(left: Operand, right: Operand, differences: list, *, color: bool) -> str:
    """``A:``/``B:`` header, one aligned ``path: left -> right`` line per difference, a count."""
    bold, red, green, reset = ("\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[0m") if color else ("",) * 4
    lines = [f"A: {left.describe()}", f"B: {right.describe()}"]
    paths = [f"{d.path or '<root>'}:" for d in differences]
    width = min(max((len(p) for p in paths), default=0), 60)
    for path, d in zip(paths, differences, strict=True):
        left_text, right_text = _show(d.left), _show(d.right)
        lines.append(
            f"{bold}{path:<{width}}{reset} {red}{left_text}{reset} -> {green}{right_text}{reset}"
        )
    count = len(differences)
    lines.append(f"{count} difference{'' if count == 1 else 's'}" if count else "no differences")
    return "\n".join(lines) + "\n"


def _as_json(difference) -> dict[str, Any]:
    from titan.config.serialize import ABSENT, class_tag, encode_value

    entry: dict[str, Any] = {"path": difference.path, "kind": difference.kind}
    for side in ("left", "right"):
        value = getattr(difference, side)
        if value is ABSENT:
            continue  # "kind" says which side lacks it
        if isinstance(value, type):
            entry[side] = class_tag(value)
            continue
        try:
            entry[side] = encode_value(value)
        except TypeError:  # a legacy TOML value JSON cannot hold (a TOML date)
            entry[side] = repr(value)
    return entry


if __name__ == "__main__":
    sys.exit(main())
