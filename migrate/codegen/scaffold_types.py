"""The types and defaults ``titan-migrate --scaffold-extension`` infers from TOML values.

A field's type is the kinds of its values in all files together: ``int`` and ``float`` make
``float``, different kinds a union (``str | int``), and a list's or table's element type comes
from all of its elements. Equal values are equal by kind too (``1`` is not ``True`` nor ``1.0``),
so a default is chosen among values the type holds. A TOML date or time has no kind here: an
extension read from source cannot declare one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from titan.migrate.codegen.pyfmt.layout import literal_text


def kind_of(value: Any) -> str | None:
    """The annotation of one scalar value's kind; ``list``/``dict`` for containers, ``None``
    for a TOML date or time."""
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return None


def nested_keys(values: list[Any]) -> set[str]:
    """Every key of the tables inside ``values``, at any depth."""
    found: set[str] = set()
    for value in values:
        if isinstance(value, dict):
            found |= set(value) | nested_keys(list(value.values()))
    return found


def has_date(value: Any) -> bool:
    """Whether ``value`` is, or holds at any depth, a TOML date or time."""
    if isinstance(value, list):
        return any(has_date(item) for item in value)
    if isinstance(value, dict):
        return any(has_date(item) for item in value.values())
    return kind_of(value) is None


def annotation(values: Sequence[Any]) -> str:
    """The type of ``values`` together: kinds in the order first seen, ``int`` folded into
    ``float``, element types of lists and dicts inferred from all their elements."""
    kinds = list(dict.fromkeys(kind_of(value) for value in values))
    if "int" in kinds and "float" in kinds:
        kinds.remove("int")
    parts = []
    for kind in kinds:
        if kind == "list":
            items = [item for value in values if isinstance(value, list) for item in value]
            parts.append(f"list[{annotation(items) if items else 'str'}]")
        elif kind == "dict":
            items = [item for value in values if isinstance(value, dict) for item in value.values()]
            parts.append(f"dict[str, {annotation(items) if items else 'str'}]")
        else:
            parts.append(kind)
    return " | ".join(parts)


def coerce(value: Any, annotation: str) -> Any:
    """``value`` as the annotation holds it: an int where only ``float`` is allowed is a float."""
    if annotation == "float" and kind_of(value) == "int":
        return float(value)
    inner = re.fullmatch(r"list\[(.*)\]", annotation)
    if inner and isinstance(value, list):
        return [coerce(item, inner[1]) for item in value]
    inner = re.fullmatch(r"dict\[str, (.*)\]", annotation)
    if inner and isinstance(value, dict):
        return {key: coerce(item, inner[1]) for key, item in value.items()}
    return value


def key(value: Any) -> str:
    """Equal values, by kind too (``1`` is not ``True`` nor ``1.0``)."""
    return f"{kind_of(value)}:{value!r}"


def shown_value(value: Any) -> str:
    """``value`` as a Python literal, cut to 40 characters for a comment."""
    text = literal_text(value)
    return text if len(text) <= 40 else text[:37] + "..."
