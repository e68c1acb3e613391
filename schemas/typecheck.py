"""Strict value checking against typing annotations, without building pydantic models.

The validator runs on every commit (pre-commit, CI), so it must start fast; constructing the
pydantic models costs more than the whole check. The pydantic models in ``titan.schemas.legacy`` stay
the source of truth: ``titan.schemas.legacy_spec`` is generated from them, and a property test shows
that this checker accepts exactly what pydantic's strict mode accepts.

Supported annotations: ``int``, ``float`` (ints accepted), ``str``, ``bool``, ``None``,
``list[X]``, ``dict[K, V]``, ``tuple[...]``, ``set[X]``, ``Literal[...]``, unions, ``Any``.
"""

from __future__ import annotations

import datetime
import types
import typing
from typing import Any, Literal, Union

from titan.schemas.ranges import shown_number

_SCALARS: dict[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "a boolean",
    type(None): "nothing (TOML has no null: leave the key out)",
}


def type_name(annotation: Any) -> str:
    """A short human name for an annotation: ``an integer``, ``a list of strings``."""
    if annotation is Any:
        return "any value"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(_show(a) for a in args)
    if origin in (Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) if named else type_name(type(None))
    if origin in (list, set, frozenset):
        inner = type_name(args[0]) if args else "values"
        return f"a list of {_plural(inner)}"
    if origin is tuple:
        return "a list"
    if origin is dict:
        return "a table"
    if annotation in (list, set, tuple):
        return "a list"
    if annotation is dict:
        return "a table"
    return getattr(annotation, "__name__", str(annotation))


def _plural(name: str) -> str:
    for article in ("an ", "a "):
        if name.startswith(article):
            noun = name[len(article) :]
            if noun.startswith("list of"):
                return "lists of" + noun[len("list of") :]
            if noun == "number":
                return "numbers"
            return noun + ("es" if noun.endswith("x") else "s")
    return name


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def value_name(value: Any) -> str:
    """What a TOML value is, for messages: ``string "10"``, ``integer 3``, ``table``."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {shown_number(value)}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        import json  # only for a message about a wrong value

        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {json.dumps(shown, ensure_ascii=False)}"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime)):
        return f"date/time {value.isoformat()}"
    return type(value).__name__


def matches(value: Any, annotation: Any) -> bool:
    """True when ``value`` (as tomllib produced it) is valid for ``annotation``, strictly."""
    if annotation is Any:
        return True
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        # TOML `lr = 1` is an int; Python (and pydantic strict mode) accept it as a float.
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if annotation is type(None) or annotation is None:
        return value is None
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return any(
            type(value) is type(choice) and value == choice for choice in annotation.__args__
        )
    if origin in (Union, types.UnionType):
        return any(matches(value, arg) for arg in annotation.__args__)
    if origin is typing.Annotated:
        return matches(value, annotation.__origin__)
    args = typing.get_args(annotation)
    if origin in (list, set, frozenset) or annotation in (list, set, frozenset):
        if not isinstance(value, list):
            return False
        return not args or all(matches(item, args[0]) for item in value)
    if origin is tuple or annotation is tuple:
        if not isinstance(value, list):
            return False
        if not args:
            return True
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(item, args[0]) for item in value)
        return len(args) == len(value) and all(
            matches(v, a) for v, a in zip(value, args, strict=True)
        )
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            return False
        if not args:
            return True
        return all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
    # A class we cannot check structurally (e.g. a user type read with --allow-import).
    return isinstance(annotation, type) and isinstance(value, annotation)
