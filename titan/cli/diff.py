"""``titan-diff A B``: the fields in which two configs differ, one line per field.

Each operand is one of:

- a registry function name (``llama3_debugmodel``), looked up in titan's built-in registries
  ``titan.models.<family>.config_registry``;
- ``package.module:function`` or ``path/to/file.py:function``;
- a dump written by ``titan.config.serialize.to_json`` / ``to_toml`` (a ``__class__`` tag at the
  root);
- a legacy TOML job config (no ``__class__`` tag). Two legacy TOMLs are compared by their
  effective values (the file over the v0.2.2 defaults and its ``custom_config_module``); turning a
  legacy TOML into a registry config is ``titan-migrate``'s job, so mixing the two kinds is refused.

Exit codes: 0 no difference, 1 differences, 2 usage error (no traceback for user mistakes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import importlib.util
import json
import os
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from titan import __version__
from titan.cli.validate import UsageError

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


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

    def describe(self) -> str:
        """The header text: the name as given and what kind of config it is."""
        if self.legacy is not None:
            return f"{self.label} (legacy TOML)"
        return f"{self.label} ({type(self.config).__qualname__})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="titan-diff",
        description="Print the fields in which two configs differ. A and B are registry function "
        "names, module:function or file.py:function, JSON/TOML dumps, or two legacy TOML files.",
        epilog="Exit status: 0 no difference, 1 differences, 2 usage error.",
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
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-diff`` command; returns the exit code."""
    return run(argv, stdout=sys.stdout, stderr=sys.stderr)


def run(argv: Sequence[str] | None, *, stdout: TextIO, stderr: TextIO) -> int:
    """``main`` with its streams passed in."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse printed the problem (or --help)
        return 0 if exit_.code in (0, None) else 2
    try:
        left = load(args.a, allowed_modules=args.allow_module)
        right = load(args.b, allowed_modules=args.allow_module)
        differences = compare(left, right)
    except UsageError as error:
        stderr.write(f"titan-diff: error: {error}\n")
        return 2
    code = 1 if differences else 0
    try:
        if args.format == "json":
            stdout.write(json.dumps([_as_json(d) for d in differences], indent=2) + "\n")
        else:
            color = args.color == "always" or (
                args.color == "auto" and stdout.isatty() and not os.environ.get("NO_COLOR")
            )
            render_text(left, right, differences, out=stdout, color=color)
        stdout.flush()
    except BrokenPipeError:  # `titan-diff A B | head`: the reader left, which is not an error
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
    return code


def compare(left: Operand, right: Operand) -> list:
    """The differences between two loaded operands."""
    from titan.config.serialize import diff

    if left.legacy is not None and right.legacy is not None:
        return legacy_diff(left.legacy, right.legacy)
    return diff(_config(left), _config(right))


def _config(operand: Operand) -> Any:
    """A registry config as is; a legacy TOML as the config titan-migrate turns it into."""
    if operand.legacy is None:
        return operand.config
    from migrate.live import instantiate
    from migrate.plan import build_plan

    plan = build_plan(operand.path, shown=operand.label)
    if plan.root is None or plan.errors():
        first = plan.errors()[0] if plan.errors() else None
        detail = f": {first.span}: {first.message}" if first is not None else ""
        raise UsageError(f"{operand.label} cannot be migrated{detail} (run titan-migrate on it)")
    return instantiate(plan)


# ---------------------------------------------------------------------------------------------
# Loading operands


def load(operand: str, *, allowed_modules: Sequence[str] = ()) -> Operand:
    """Load one operand (see the module docstring); ``UsageError`` for any user mistake."""
    path = Path(operand)
    if path.is_file() and path.suffix != ".py":
        return _load_file(path, operand, allowed_modules)
    head, sep, function = operand.rpartition(":")
    if sep and head and function:
        return Operand(label=operand, config=_call(_named_function(head, function)))
    if path.suffix == ".py" and path.is_file():
        raise UsageError(f"{operand}: name the registry function too: {operand}:FUNCTION")
    if path.suffix in (".toml", ".json", ".py") or "/" in operand or os.sep in operand:
        raise UsageError(f"{operand}: no such file")
    return Operand(label=operand, config=_call(_builtin_function(operand)))


def _load_file(path: Path, shown: str, allowed_modules: Sequence[str]) -> Operand:
    from titan.config.serialize import CLASS_TAG, from_dict, from_toml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{shown}: cannot read the file: {error}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            where = f"{shown}:{error.lineno}:{error.colno}"
            raise UsageError(f"{where}: invalid JSON: {error.msg}") from None
        if not (isinstance(data, dict) and CLASS_TAG in data):
            raise UsageError(f"{shown}: not a titan config dump (no __class__ tag at the root)")
        return Operand(label=shown, config=_rebuild(from_dict, data, shown, allowed_modules))
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message, where = str(error), _TOML_POSITION.search(str(error))
        if where:
            message = message[: where.start()] + message[where.end() :]
        line, col = (where.group(1), where.group(2)) if where else (text.count("\n") + 1, 1)
        raise UsageError(f"{shown}:{line}:{col}: invalid TOML: {message}") from None
    if CLASS_TAG in document:
        return Operand(label=shown, config=_rebuild(from_toml, text, shown, allowed_modules))
    return Operand(label=shown, legacy=legacy_values(text, path=path, shown=shown), path=path)


def _rebuild(reader, data: Any, shown: str, allowed_modules: Sequence[str]) -> Any:
    try:
        return reader(data, allowed_modules=allowed_modules)
    except ValueError as error:
        raise UsageError(f"{shown}: {error}") from None


def _registry_error(error) -> UsageError:
    where = f"{error.span}: " if error.span is not None else ""
    hint = f"\n  hint: {error.hint}" if error.hint else ""
    return UsageError(f"{where}{error.message}{hint}")


def _named_function(module_name: str, name: str):
    """``module:function`` or ``file.py:function``."""
    from titan.config import manager

    try:
        if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
            module = manager.load_file(module_name)
        else:
            module = manager.import_module(module_name)
    except manager.RegistryError as error:
        raise _registry_error(error) from None
    function = getattr(module, name, None)
    if not callable(function):
        known = sorted(manager.registry_functions(module))
        raise UsageError(f"{module_name} has no function `{name}`" + _did_you_mean(name, known))
    return manager.RegistryFunction(name, function, module)


def _builtin_function(name: str):
    """The function ``name`` in titan's built-in registries (families not written yet are skipped)."""
    from titan.config import manager

    owners = []
    known: set[str] = set()
    for module in builtin_registries():
        functions = manager.registry_functions(module)
        known.update(functions)
        if name in functions:
            owners.append(manager.RegistryFunction(name, functions[name], module))
    if len(owners) > 1:
        choices = ", ".join(f"{o.module.__name__}:{name}" for o in owners)
        raise UsageError(f"`{name}` is defined by several registries; name one of {choices}")
    if owners:
        return owners[0]
    if not known:
        raise UsageError(
            f"no config function `{name}`: no built-in registry is available; "
            "name it as package.module:function or path/to/file.py:function"
        )
    raise UsageError(f"no config function `{name}`" + _did_you_mean(name, sorted(known)))


def builtin_registries() -> list:
    """titan's built-in registry modules, ``titan.models.<family>.config_registry``, that exist."""
    from titan.config import manager

    try:
        from titan.models import SUPPORTED_MODELS
    except ImportError:
        return []
    modules = []
    for family in SUPPORTED_MODELS:
        name = f"titan.models.{family}.config_registry"
        try:
            exists = importlib.util.find_spec(name) is not None
        except ImportError:  # the family package itself is not there yet
            exists = False
        if exists:
            try:
                modules.append(manager.import_module(name))
            except manager.RegistryError as error:
                raise _registry_error(error) from None
    return modules


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        return "; did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
    return f"; known: {', '.join(known)}" if known else ""


def _call(found) -> Any:
    from titan.config import manager

    try:
        config = manager.call(found)
    except manager.RegistryError as error:
        raise _registry_error(error) from None
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise UsageError(f"{found.name}() returned {type(config).__name__}, not a config")
    return config


# ---------------------------------------------------------------------------------------------
# Legacy TOMLs


def legacy_values(text: str, *, path: Path, shown: str) -> dict[str, Any]:
    """Every effective value of a legacy TOML by dotted key: the file over the v0.2.2 defaults.

    Keys the schema does not know are kept as written, so a typo shows up as a difference.
    """
    from schemas.spec import MISSING, SectionSpec
    from schemas.toml_check import check_text

    checked = check_text(text, file=shown, base_dir=path.resolve().parent)
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


def render_text(left: Operand, right: Operand, differences: list, *, out: TextIO, color: bool):
    """``A:``/``B:`` header, one aligned ``path: left -> right`` line per difference, a count."""
    bold, red, green, reset = ("\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[0m") if color else ("",) * 4
    out.write(f"A: {left.describe()}\nB: {right.describe()}\n")
    paths = [f"{d.path or '<root>'}:" for d in differences]
    width = min(max((len(p) for p in paths), default=0), 60)
    for path, d in zip(paths, differences, strict=True):
        left_text, right_text = _show(d.left), _show(d.right)
        out.write(f"{bold}{path:<{width}}{reset} {red}{left_text}{reset} -> ")
        out.write(f"{green}{right_text}{reset}\n")
    count = len(differences)
    out.write(f"{count} difference{'' if count == 1 else 's'}\n" if count else "no differences\n")


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
