"""The small data language ``migrate/targets/upstream_api_030.py`` describes field types in, and
the test of a statically read value against it.

A type is ``"any"``, ``"None"``, ``"bool"``, ``"int"``, ``"float"``, ``"str"``, or a tuple:
``("literal", values)``, ``("union", types)``, ``("list", item)``, ``("tuple", items)``,
``("dict", key, value)``, ``("config", "module:Qual.Name")`` (that class or a subclass).
Nothing here imports torchtitan (or anything beyond the standard library).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OPAQUE = _Marker("OPAQUE")
"""A default the table cannot write as data (a factory that needs a device): read as unknown."""
REQUIRED = _Marker("REQUIRED")
"""The default of a field that has none: a call must pass it."""


def spell(tp: Any) -> str:
    """A type as Python would annotate it (for messages)."""
    if isinstance(tp, str):
        return tp
    kind = tp[0]
    if kind == "literal":
        return " | ".join(repr(v) for v in tp[1])
    if kind == "union":
        return " | ".join(spell(t) for t in tp[1])
    if kind == "list":
        return f"list[{spell(tp[1])}]"
    if kind == "tuple":
        return f"tuple[{', '.join(spell(t) for t in tp[1])}]"
    if kind == "dict":
        return f"dict[{spell(tp[1])}, {spell(tp[2])}]"
    if kind == "config":
        return tp[1].rpartition(":")[2]
    return "any"


def choices(tp: Any) -> tuple | None:
    """The values a ``Literal`` type (or a union of literals and ``None``) allows."""
    if isinstance(tp, tuple) and tp[0] == "literal":
        return tp[1]
    if isinstance(tp, tuple) and tp[0] == "union":
        found: list = []
        for t in tp[1]:
            if t == "None":
                found.append(None)
                continue
            sub = choices(t)
            if sub is None:
                return None
            found += sub
        return tuple(found)
    return None


def accepts(tp: Any, value: Any, *, is_config: Callable[[Any, str], bool | None]) -> bool | None:
    """Whether a statically read ``value`` fits ``tp``: ``True``, ``False``, or ``None`` when it
    cannot be told. ``is_config(value, path)`` answers for anything that is not a plain literal:
    whether that object is of the class ``path`` (``""``: of any class), or ``None`` when the
    value is unknown (then so is the answer)."""
    if tp == "any":
        return True
    literal = value is None or isinstance(value, bool | int | float | str | list | tuple | dict)
    if not literal:
        answer = is_config(value, "")
        if answer is None:
            return None  # an unknown value fits nothing and everything
        if not (isinstance(tp, tuple) and tp[0] in ("config", "union")):
            return False  # a config object where a number, string or list belongs
    if isinstance(tp, str):
        if tp == "None":
            return value is None
        if tp == "bool":
            return isinstance(value, bool)
        if tp == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if tp == "float":  # an int is a float by the numeric tower
            return isinstance(value, int | float) and not isinstance(value, bool)
        if tp == "str":
            return isinstance(value, str)
        return True
    kind = tp[0]
    if kind == "literal":
        return any(type(value) is type(v) and value == v for v in tp[1])
    if kind == "union":
        answers = [accepts(t, value, is_config=is_config) for t in tp[1]]
        if any(a is True for a in answers):
            return True
        return None if any(a is None for a in answers) else False
    if kind in ("list", "tuple"):
        if not isinstance(value, list | tuple):
            return False
        items = [tp[1]] * len(value) if kind == "list" else list(tp[1])
        if kind == "tuple" and len(items) != len(value):
            return False
        answers = [accepts(t, v, is_config=is_config) for t, v in zip(items, value, strict=False)]
        if any(a is False for a in answers):
            return False
        return None if any(a is None for a in answers) else True
    if kind == "dict":
        if not isinstance(value, dict):
            return False
        answers = [accepts(tp[1], k, is_config=is_config) for k in value] + [
            accepts(tp[2], v, is_config=is_config) for v in value.values()
        ]
        if any(a is False for a in answers):
            return False
        return None if any(a is None for a in answers) else True
    if kind == "config":
        return False if literal else is_config(value, tp[1])
    return True
