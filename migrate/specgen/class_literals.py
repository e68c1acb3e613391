"""Config classes and their default values as Python source text, for the spec codegens.

``migrate/specgen/target_codegen.py`` (titan's classes) and ``migrate/specgen/upstream_codegen.py``
(upstream torchtitan's) both write a table of ``ClassInfo`` rows whose defaults are literals. The
second one runs inside another virtual environment, the one that has torchtitan, where titan and the
rest of ``migrate`` are not meant to be loaded; so this module imports nothing but the standard
library and ``titan.migrate.targets.spec_types``, and the classes it is given are imported by the caller.

A default that cannot be written as data (a function, a tensor, an enum) is an error naming the
class and field it belongs to: a table that silently left a field out would make the migrator
believe the field's default is whatever it guesses.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

from titan.migrate.targets.spec_types import REQUIRED


class UnwritableDefault(TypeError):
    """A default value that has no literal form (the message names its class and field)."""


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def import_module_of(cls: type) -> str:
    """The shortest package that exports the class' outermost name (``titan.config`` for
    ``titan.config.configs:TrainingConfig``), so generated imports read like hand-written ones."""
    top = cls.__qualname__.split(".")[0]
    owner = getattr(importlib.import_module(cls.__module__), top)
    parts = cls.__module__.split(".")
    for end in range(2, len(parts)):
        package = importlib.import_module(".".join(parts[:end]))
        if getattr(package, top, None) is owner:
            return package.__name__
    return cls.__module__


def defaults_of(cls: type) -> dict[str, Any]:
    """Every field of a config dataclass -> the value an instance gets when it is not passed.

    A class whose fields all have defaults is instantiated, so a ``__post_init__`` that fills a
    field in is seen. A field without a default gets :data:`REQUIRED`; such a class cannot be
    instantiated bare, so a ``__post_init__`` on it would go unseen and is refused instead.
    """
    fields = dataclasses.fields(cls)
    hidden = [f.name for f in fields if not f.init]
    if hidden:
        # A constructor cannot be given such a field, so a table of constructor defaults has
        # no way to describe it.
        raise UnwritableDefault(f"{class_path(cls)}: fields set by the class itself: {hidden}")
    required = {
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    if not required:
        instance = cls()
        return {f.name: getattr(instance, f.name) for f in fields}
    if hasattr(cls, "__post_init__"):
        raise UnwritableDefault(
            f"{class_path(cls)}: has required fields {sorted(required)} and a __post_init__, "
            "so the defaults of its other fields cannot be read"
        )
    return {
        f.name: REQUIRED
        if f.name in required
        else (f.default if f.default is not dataclasses.MISSING else f.default_factory())
        for f in fields
    }


def literal(value: Any, classes: dict[str, Any], where: str = "a default") -> str:
    """Source text of a default value; config objects become ``Default(...)`` and their classes
    are queued in ``classes``. ``where`` names the class field the value is the default of."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        path = class_path(type(value))
        classes.setdefault(path, None)
        base = defaults_of(type(value))
        items = []
        for f in dataclasses.fields(value):
            text = literal(getattr(value, f.name), classes, f"{path}.{f.name}")
            # Two values are the same default when they are written the same: that is strict
            # about types (1 is not 1.0, [] is not ()) and lets a nan equal a nan.
            if text != literal(base[f.name], {}, f"{path}.{f.name}"):
                items.append(f"{f.name!r}: {text}")
        return f"Default({path!r}, {{{', '.join(items)}}})"
    if value is REQUIRED:
        return "REQUIRED"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v, classes, where) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(literal(v, classes, where) + ", " for v in value) + ")"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(
                f"{literal(k, classes, where)}: {literal(v, classes, where)}"
                for k, v in value.items()
            )
            + "}"
        )
    if value is None or type(value) in (bool, int, float, str):
        return repr(value)
    raise UnwritableDefault(
        f"{where}: cannot write a default of type {type(value).__qualname__}: {value!r}"
    )
