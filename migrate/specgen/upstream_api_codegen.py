"""Write ``migrate/targets/upstream_api_030.py``: what a registry module of torchtitan 0.3.0 can
call, as data, so that ``titan-validate`` checks such a module without torchtitan installed.

``migrate/targets/upstream_spec_030.py`` holds what a *migration* writes (the defaults of the
classes it names); this table holds what any hand-written module can *name*:

- ``FIELDS``: every config dataclass of the package (every module that imports here), each field
  with its type (a small data language, see ``titan.migrate.targets.upstream_types``), whether
  it is required, its default, and the choices and bounds its ``__post_init__`` enforces with a
  plain ``if self.<field> ...: raise`` guard;
- ``BASES``: each config class' torchtitan base classes (a field typed with a base takes any
  subclass);
- ``NAMES``: every importable module -> every name it defines, and ``EXPORTS``: the names among
  them that are config classes, their owners, or functions of ``FUNCTIONS`` (a name imported
  from a module that does not define it fails the import);
- ``FUNCTIONS``: the signature of every function defined in the package whose return type is a
  config class or a ``ModelSpec``, and of every family's ``model_registry``;
- ``FLAVOR_FACTS``: per family and flavor, the model's depth, heads and experts, as built.

It runs inside the environment that has torchtitan (``make schema-upstream``)::

    PYTHONPATH=. .venv-upstream/bin/python -m titan.migrate.specgen.upstream_api_codegen

and imports only the standard library, torchtitan and ``titan.migrate.specgen.class_literals``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import logging
import sys
import textwrap
import types
import typing
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

from titan.migrate.specgen.class_literals import UnwritableDefault, class_path, literal

VERSION = "0.3.0"
OUT = Path(__file__).parents[1] / "targets" / "upstream_api_030.py"
MODEL_SPEC = "torchtitan.protocols.model_spec:ModelSpec"

SKIPPED_PACKAGES = ("torchtitan.experiments",)
"""Walked too, but a module of these that fails to import is left out rather than failing the
generator; so is any module that needs a package the release does not depend on (vLLM,
Monarch, torchvision)."""


def walk_modules() -> tuple[dict[str, types.ModuleType], list[str]]:
    """Every module of the package that imports in this environment, and those that did not
    (experiments only; a core module that fails is an error)."""
    import torchtitan

    found: dict[str, types.ModuleType] = {"torchtitan": torchtitan}
    failed: list[str] = []
    # Files, not pkgutil: some of the package's folders are namespace packages (no
    # __init__.py: torchtitan.components), which pkgutil.walk_packages does not enter.
    root = Path(torchtitan.__file__).parent
    names = set()
    for file in sorted(root.rglob("*.py")):
        relative = file.relative_to(root.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(p in ("tests", "__pycache__") or p.startswith("test_") for p in parts):
            continue
        names.add(".".join(parts))
        for end in range(2, len(parts)):  # the folders above it, namespace packages too
            names.add(".".join(parts[:end]))
    for name in sorted(names):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found[name] = importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - recorded; core modules must import
            missing = isinstance(error, ImportError) and not str(
                getattr(error, "name", "") or ""
            ).startswith("torchtitan")
            if not (missing or name.startswith(SKIPPED_PACKAGES)):
                raise LookupError(f"{name} does not import: {error!r}") from error
            failed.append(name)
    failed = [n for n in set(failed) if not any(n.startswith(m + ".") for m in failed)]
    return found, sorted(failed)


def is_config_class(value: Any) -> bool:
    return (
        isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__.startswith("torchtitan")
    )


def config_classes(modules: dict[str, types.ModuleType]) -> dict[str, type]:
    """``module:Qual.Name`` -> every dataclass defined in the package, nested ones included."""
    found: dict[str, type] = {}

    def visit(cls: type, depth: int = 0) -> None:
        if depth > 4:
            return
        if is_config_class(cls):
            found.setdefault(class_path(cls), cls)
        for value in vars(cls).values():
            if isinstance(value, type) and value.__qualname__.startswith(cls.__qualname__ + "."):
                visit(value, depth + 1)

    for module in modules.values():
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__.startswith("torchtitan"):
                visit(value)
    return found


def describe(tp: Any) -> Any:
    """A type annotation in the table's data language (``titan.migrate.targets.upstream_types``)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is typing.Any or tp is object or isinstance(tp, typing.TypeVar):
        return "any"
    if tp is type(None) or tp is None:
        return "None"
    if tp in (bool, int, float, str):
        return tp.__name__
    if origin is typing.Annotated:
        return describe(args[0])
    if origin is typing.Literal:
        values = tuple(a for a in args if a is None or type(a) in (bool, int, float, str))
        return ("literal", values) if len(values) == len(args) else "any"
    if origin in (typing.Union, types.UnionType):
        return ("union", tuple(describe(a) for a in args))
    if origin in (list, typing.List, typing.Sequence, set, frozenset):  # noqa: UP006
        return ("list", describe(args[0]) if args else "any")
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return ("list", describe(args[0]))
        return ("tuple", tuple(describe(a) for a in args)) if args else ("list", "any")
    if origin in (dict, typing.Dict, typing.Mapping):  # noqa: UP006
        return ("dict", *(describe(a) for a in args)) if args else ("dict", "any", "any")
    if origin is type or tp is type:
        return "any"
    if is_config_class(tp):
        return ("config", class_path(tp))
    if isinstance(tp, type) and class_path(tp) == MODEL_SPEC:
        return ("config", MODEL_SPEC)
    return "any"  # a torch.dtype, a callable, a protocol: not a literal's business


def hints_of(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - a forward reference that does not resolve: typed "any"
        return {}


def guards_of(cls: type) -> dict[str, dict[str, Any]]:
    """field -> ``{"choices": (...), "ge"/"gt"/"le"/"lt": n, "not": (...)}`` from the plain
    ``if self.<field> <op> <constant>: raise ...`` guards of the ``__post_init__`` of the class
    and of its bases (a subclass' own calls its base's)."""
    found: dict[str, dict[str, Any]] = {}
    for owner in reversed(cls.__mro__):
        function = vars(owner).get("__post_init__")
        if function is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError, SyntaxError):
            continue
        _guards(tree, found)
    return {k: v for k, v in found.items() if v}


def _guards(tree: ast.AST, found: dict[str, dict[str, Any]]) -> None:
    flipped = {ast.Lt: "ge", ast.LtE: "gt", ast.Gt: "le", ast.GtE: "lt"}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)):
            continue
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
            continue
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if not (
            isinstance(left, ast.Attribute)
            and isinstance(left.value, ast.Name)
            and left.value.id == "self"
        ):
            continue
        try:
            value = ast.literal_eval(right)
        except ValueError:
            continue
        entry = found.setdefault(left.attr, {})
        if isinstance(op, ast.NotIn) and isinstance(value, set | tuple | list):
            entry["choices"] = tuple(sorted(value, key=repr))
        elif isinstance(op, ast.Eq):
            entry["not"] = (*entry.get("not", ()), value)
        elif type(op) in flipped and type(value) in (int, float):
            entry[flipped[type(op)]] = value


def field_rows(classes: dict[str, type]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for path, cls in sorted(classes.items()):
        hints, guards = hints_of(cls), guards_of(cls)
        fields = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default: Any = f.default
            elif f.default_factory is not dataclasses.MISSING:
                try:
                    default = f.default_factory()
                except Exception:  # noqa: BLE001 - a factory that needs a device: unread
                    default = _OPAQUE
            else:
                default = _REQUIRED
            fields[f.name] = {
                "type": describe(hints.get(f.name, "any")),
                "default": default,
                **guards.get(f.name, {}),
            }
        rows[path] = {"kw_only": _all_kw_only(cls), "fields": fields}
    return rows


def _all_kw_only(cls: type) -> bool:
    return all(f.kw_only for f in dataclasses.fields(cls) if f.init)


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name


_OPAQUE = _Marker("OPAQUE")
_REQUIRED = _Marker("REQUIRED")


def default_text(value: Any, where: str) -> str:
    if isinstance(value, _Marker):
        return value.name
    try:
        return literal(value, {}, where)
    except UnwritableDefault:
        return "OPAQUE"


def bases_of(classes: dict[str, type]) -> dict[str, tuple[str, ...]]:
    return {
        path: tuple(class_path(b) for b in cls.__mro__[1:] if class_path(b) in classes)
        for path, cls in sorted(classes.items())
    }


def signature_row(function: Any) -> dict[str, Any] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception:  # noqa: BLE001
        hints = {}
    params = []
    for p in signature.parameters.values():
        params.append(
            (
                p.name,
                p.kind.name,
                p.default is inspect.Parameter.empty,
                describe(hints[p.name]) if p.name in hints else "any",
            )
        )
    returns = describe(hints["return"]) if "return" in hints else "any"
    return {"params": tuple(params), "returns": returns}


SCALAR_HELPERS = ("torchtitan.models.", "torchtitan.components.")
"""Where a public function returning a number or a string is one a registry module may call
(``decoder_vocab_size``); elsewhere such functions are run-time helpers."""


def function_rows(modules: dict[str, types.ModuleType]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for module in modules.values():
        for attribute, value in list(vars(module).items()):
            if not inspect.isfunction(value) or not value.__module__.startswith("torchtitan"):
                continue
            path = f"{value.__module__}:{value.__qualname__}"
            if path in rows or "<locals>" in path:
                continue
            row = signature_row(value)
            if row is None:
                continue
            returns = row["returns"]
            public = not value.__name__.startswith("_")
            wanted = attribute == "model_registry" or (
                public and isinstance(returns, tuple) and returns[0] == "config"
            )
            helper = (
                public
                and returns in ("int", "str", "bool", "float")
                and value.__module__.startswith(SCALAR_HELPERS)
            )
            if wanted or helper:
                rows[path] = row
    return dict(sorted(rows.items()))


def name_rows(
    modules: dict[str, types.ModuleType], classes: dict[str, type], functions: dict[str, Any]
) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Every module's names, and ``module:name`` -> what it is, for the names worth knowing."""
    owners = {
        path.partition(":")[0] + ":" + path.partition(":")[2].split(".")[0] for path in classes
    }
    names: dict[str, tuple[str, ...]] = {}
    exports: dict[str, str] = {}
    for name, module in sorted(modules.items()):
        public = {k: v for k, v in vars(module).items() if _public(k)}
        names[name] = tuple(sorted(public))
        for attribute, value in sorted(public.items()):
            if isinstance(value, types.ModuleType) and value.__name__ in modules:
                exports[f"{name}:{attribute}"] = f"module:{value.__name__}"
            elif isinstance(value, type) and value.__module__.startswith("torchtitan"):
                path = class_path(value)
                if path in classes or path in owners or path == MODEL_SPEC:
                    exports[f"{name}:{attribute}"] = f"class:{path}"
            elif inspect.isfunction(value):
                path = f"{value.__module__}:{value.__qualname__}"
                if path in functions:
                    exports[f"{name}:{attribute}"] = f"function:{path}"
    return names, exports


def _public(name: str) -> bool:
    """Names a registry module imports: public ones, and ``model_registry``'s private tables
    are not among them (a private name is not checked)."""
    return not name.startswith("_")


FACT_FIELDS = {
    "n_heads": ("n_heads", "num_heads", "num_attention_heads"),
    "n_kv_heads": ("n_kv_heads", "num_kv_heads", "num_key_value_heads"),
    "num_experts": ("num_experts",),
    "top_k": ("top_k",),
}


def flavor_facts(families: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """family -> flavor -> depth, heads and experts of the model ``model_registry`` builds (the
    first value of each kind met in the model's config tree, attention before experts)."""
    facts: dict[str, dict[str, dict[str, Any]]] = {}
    for name in families:
        module = importlib.import_module(name)
        family = name.rpartition(".")[2]
        from titan.migrate.specgen.upstream_codegen import flavors_of

        facts[family] = {}
        for flavor in flavors_of(module):
            try:
                model = module.model_registry(flavor).model
            except Exception:  # noqa: BLE001 - a flavor that needs hardware to build
                continue
            row: dict[str, Any] = {}
            layers = getattr(model, "layers", None)
            if isinstance(layers, list | tuple):
                row["n_layers"] = len(layers)
            elif isinstance(getattr(model, "n_layers", None), int):
                row["n_layers"] = model.n_layers
            seen = [model]
            for _ in range(6):  # breadth-first through the config tree, a few levels deep
                nxt = []
                for node in seen:
                    if not dataclasses.is_dataclass(node):
                        continue
                    for f in dataclasses.fields(node):
                        value = getattr(node, f.name, None)
                        for fact, spellings in FACT_FIELDS.items():
                            if f.name in spellings and type(value) is int and fact not in row:
                                row[fact] = value
                        if dataclasses.is_dataclass(value):
                            nxt.append(value)
                        elif isinstance(value, list | tuple) and value:
                            nxt.append(value[0])
                seen = nxt
            if "num_experts" in row:
                row["moe"] = True
            facts[family][flavor] = row
    return facts


def generate() -> str:
    installed = version("torchtitan")
    if installed != VERSION:
        raise LookupError(f"this environment has torchtitan {installed}; the table is of {VERSION}")
    logging.disable(logging.WARNING)
    from titan.migrate.specgen.upstream_codegen import family_modules

    modules, failed = walk_modules()
    classes = config_classes(modules)
    functions = function_rows(modules)
    names, exports = name_rows(modules, classes, functions)
    rows = field_rows(classes)
    lines = ["FIELDS: dict[str, dict[str, Any]] = {\n"]
    for path, row in rows.items():
        lines.append(
            f"    {path!r}: {{\n        'kw_only': {row['kw_only']!r},\n        'fields': {{\n"
        )
        for field, spec in row["fields"].items():
            items = [f"'type': {spec['type']!r}"]
            items.append(f"'default': {default_text(spec['default'], f'{path}.{field}')}")
            items += [f"{k!r}: {v!r}" for k, v in spec.items() if k not in ("type", "default")]
            lines.append(f"            {field!r}: {{{', '.join(items)}}},\n")
        lines.append("        },\n    },\n")
    lines.append("}\n")
    fields_text = "".join(lines)
    facts = flavor_facts(family_modules())
    return (
        f'"""What a registry module of upstream torchtitan {VERSION} can call, as data: generated by\n'
        "``python -m titan.migrate.specgen.upstream_api_codegen`` in an environment with that release.\n"
        "\nDo not edit: ``make schema-upstream`` rewrites it and ``make test-upstream`` fails while it "
        "is stale.\n"
        '"""\n\n'
        "from typing import Any\n\n"
        "from titan.migrate.targets.spec_types import Default  # noqa: F401 - in FIELDS' defaults\n"
        "from titan.migrate.targets.upstream_types import OPAQUE, REQUIRED  # noqa: F401\n\n"
        f"VERSION = {VERSION!r}\n\n"
        f"MODEL_SPEC = {MODEL_SPEC!r}\n\n"
        f"UNIMPORTABLE: tuple[str, ...] = {tuple(failed)!r}\n"
        '"""Modules of the package that did not import where the table was made (they need a\n'
        'package the release does not depend on); names from them are not checked."""\n\n'
        + fields_text
        + '"""``module:Qual.Name`` -> ``{"kw_only": bool, "fields": {name: {"type", "default",\n'
        'and "choices" / "not" / "ge" / "gt" / "le" / "lt" where a guard enforces them}}}``."""\n\n'
        f"BASES: dict[str, tuple[str, ...]] = {bases_of(classes)!r}\n\n"
        f"FUNCTIONS: dict[str, dict[str, Any]] = {functions!r}\n"
        '"""``module:qualname`` -> ``{"params": ((name, kind, required, type), ...), "returns": type}``."""\n\n'
        f"EXPORTS: dict[str, str] = {exports!r}\n"
        '"""``module:name`` -> ``module:<module>``, ``class:<path>`` or ``function:<path>``."""\n\n'
        f"NAMES: dict[str, tuple[str, ...]] = {names!r}\n"
        '"""Every importable module -> every public name it defines."""\n\n'
        f"FLAVOR_FACTS: dict[str, dict[str, dict[str, Any]]] = {facts!r}\n"
    )


def main(argv: list[str] | None = None) -> int:
    from titan.migrate.specgen.upstream_codegen import run_generator

    return run_generator(generate, out=OUT, name="upstream_api_codegen", doc=__doc__, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
