"""Which unknown keys a fork's extension can declare: a key becomes a field of a dataclass.

``titan-migrate --scaffold-extension`` writes one dataclass field per key a fork adds, and the
extension reader reads those fields back from source. A key that cannot be a field (``my-key``,
``class``, ``__x``) or a value an extension read from source cannot hold (a TOML date or time)
is left out of the scaffold; the hint of an unknown key says so instead of suggesting a scaffold
that would refuse it. Pure Python, for ``titan.schemas.suggest`` and the scaffold alike.
"""

from __future__ import annotations

import datetime
import keyword
from typing import Any

DATE = "it holds a TOML date or time, which an extension read from source cannot declare"
"""Why a key whose value holds a date cannot be declared."""


def field_name_problem(name: str) -> str | None:
    """Why ``name`` (a key of a fork's section) cannot be a field of a generated dataclass."""
    if not name.isidentifier():
        return "it is not a Python name"
    if keyword.iskeyword(name) or name == "__debug__":
        return "Python does not allow it as an attribute name"
    if name.startswith("__") and name.endswith("__"):
        return "Python reserves names of the form __x__ for itself"
    if name.startswith("__"):
        return "Python renames (mangles) a __name inside a class body"
    return None


def refused(parts: tuple[str, ...], value: Any, *, known: int) -> list[tuple[str, str]]:
    """(dotted key, why) for each key under the unknown key ``parts`` (whose first ``known``
    parts are sections the schema has) that the scaffold cannot declare, as it decides: a table
    of a new top-level section, or one whose keys are all names, is a class of fields; any other
    table is one ``dict`` field."""
    found = [
        (".".join(parts[: index + 1]), why)
        for index, part in enumerate(parts)
        if index >= known and (why := field_name_problem(part)) is not None
    ]
    if found:
        return found[:1]
    return _inside(parts, value)


def _inside(parts: tuple[str, ...], value: Any) -> list[tuple[str, str]]:
    dotted = ".".join(parts)
    if _has_date(value):  # the scaffold leaves out the whole key (a table: all of it)
        return [(dotted, DATE)]
    if not isinstance(value, dict):
        return []
    if len(parts) > 1 and not all(isinstance(k, str) and k.isidentifier() for k in value):
        return []  # one dict field: its keys need not be names
    found = []
    for key, item in value.items():
        why = field_name_problem(key)
        if why is not None:
            found.append((f"{dotted}.{key}", why))
        else:
            found += _inside((*parts, key), item)
    return found


def _has_date(value: Any) -> bool:
    """Whether a TOML value holds a date, a time or a date-time anywhere."""
    if isinstance(value, datetime.date | datetime.time):
        return True
    if isinstance(value, dict):
        return any(_has_date(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_date(v) for v in value)
    return False
