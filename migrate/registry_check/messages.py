"""Where a finding of the static reading stands, and the words and hints it says.

Pure functions over syntax nodes and the generated 0.3.0 tables, used by ``reader`` and
``calls``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from titan.migrate.registry_check import api
from titan.migrate.registry_check.values import At, Obj, Spec, plain
from titan.schemas.misspelling import is_misspelling


def _at(node: ast.AST, length: int | None = None) -> At:
    line = getattr(node, "lineno", 1) or 1
    col = (getattr(node, "col_offset", 0) or 0) + 1
    return At(line, col, col + length if length else None)


def _keyword_at(keyword: ast.keyword) -> At:
    return _at(keyword, len(keyword.arg) if keyword.arg else None)


def _attr_at(node: ast.Attribute) -> At:
    """The attribute's own name (``stpes`` of ``config.training.stpes``)."""
    end_line = getattr(node, "end_lineno", None)
    end_col = getattr(node, "end_col_offset", None)
    if end_line is not None and end_col is not None and end_line == node.lineno:
        return At(end_line, end_col - len(node.attr) + 1, end_col + 1)
    return _at(node)


def _alias_at(node: ast.ImportFrom, alias: ast.alias) -> At:
    if getattr(alias, "lineno", None):
        return _at(alias, len(alias.name))
    return _at(node)


def _shown(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _shown_value(value: Any) -> str:
    text = repr(value) if plain(value) else f"a {type(value).__name__}"
    if isinstance(value, Obj):
        text = f"`{api.short(value.cls)}(...)`"
    elif isinstance(value, Spec):
        text = "a model spec"
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, Obj):
        return "a config object"
    return type(value).__name__


def _choice_hint(value: Any, allowed: tuple) -> str:
    if isinstance(value, str):
        close = [c for c in allowed if isinstance(c, str) and is_misspelling(value, c)]
        if close:
            return f"did you mean {close[0]!r}?"
    return f"use one of {', '.join(repr(c) for c in allowed)}"


def _guard_problem(field: dict, value: Any) -> str | None:
    if "choices" in field and value not in field["choices"]:
        return f"it must be one of {', '.join(repr(c) for c in field['choices'])}"
    if value in field.get("not", ()):
        return f"{_shown_value(value)} is refused"
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, test, words in (
            ("ge", lambda v, b: v >= b, "at least"),
            ("gt", lambda v, b: v > b, "greater than"),
            ("le", lambda v, b: v <= b, "at most"),
            ("lt", lambda v, b: v < b, "less than"),
        ):
            if key in field and not test(value, field[key]):
                return f"it must be {words} {field[key]}"
    return None


def guard_hint(field: dict) -> str:
    parts = []
    if "choices" in field:
        parts.append(f"one of {', '.join(repr(c) for c in field['choices'])}")
    for key, words in (("ge", "at least"), ("gt", "above"), ("le", "at most"), ("lt", "below")):
        if key in field:
            parts.append(f"{words} {field[key]}")
    if field.get("not"):
        parts.append(f"not {', '.join(repr(v) for v in field['not'])}")
    return f"use a value {' and '.join(parts)}" if parts else "use another value"


def _first_fields(row: dict, count: int) -> str:
    return ", ".join(f"{name}=..." for name in list(row)[:count])


def _other_class_hint(key: str, path: str) -> str | None:
    """Where a field of that name lives when it is not this class' (``warmup_steps`` of
    ``TrainingConfig`` is ``LRSchedulersContainer.Config``'s)."""
    owners = [p for p in api.field_owners().get(key, ()) if p != path]
    if not owners:
        return None
    home = next((o for o in owners if api.trainer_home(o)), owners[0])
    field = api.trainer_home(home)
    where = f" (Trainer.Config's `{field}`)" if field else ""
    return f"`{key}` is a field of `{api.short(home)}`{where}, not of `{api.short(path)}`"


def _module_hint(name: str) -> str:
    parent = name.rpartition(".")[0]
    while parent and not api.is_module(parent):
        parent = parent.rpartition(".")[0]
    if not parent:
        return "check the module path against the installed torchtitan"
    leaf = name[len(parent) + 1 :].split(".")[0]
    subs = [m.rpartition(".")[2] for m in _submodules(parent)]
    close = [s for s in subs if is_misspelling(leaf, s)]
    if close:
        return f"did you mean `{parent}.{close[0]}`?"
    return f"`{parent}` has {', '.join(sorted(subs)[:10])}" if subs else f"see `{parent}`"


def _submodules(parent: str) -> Iterator[str]:
    from titan.migrate.targets.upstream_api_030 import NAMES

    for module in NAMES:
        if module.rpartition(".")[0] == parent:
            yield module


def _elsewhere_hint(name: str, module: str) -> str:
    from titan.migrate.targets.upstream_api_030 import EXPORTS

    homes = sorted({k.partition(":")[0] for k in EXPORTS if k.partition(":")[2] == name})
    if homes:
        shortest = min(homes, key=len)
        return f"`{name}` is in `{shortest}`"
    return f"see what `{module}` defines"
