"""A neutral description of config sections, shared by the static reader and the schema builder.

A custom ``job.custom_config_module`` is described as a tree of :class:`SectionSpec` whether it was
read from source (the default, nothing is executed) or imported (``--allow-import``). The schema
builder merges such a tree into the built-in legacy models with the rules of v0.2.2's
``ConfigManager._merge_configs``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MISSING: Any = dataclasses.MISSING
"""Marks a field whose default could not be determined (or that has none)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FieldSpec:
    """One dataclass field: its name, type, default and one-line documentation."""

    name: str
    """The field name as written in the dataclass (and in TOML)."""
    annotation: Any
    """A typing object (``int``, ``list[str]``, ``Literal[...]``, ``X | None``), a nested
    :class:`SectionSpec`, or ``typing.Any`` when the type could not be resolved statically."""
    default: Any = MISSING
    """The default value (already evaluated, e.g. ``[]`` for ``default_factory=list``)."""
    doc: str | None = None
    """The docstring written under the field, if any."""
    line: int | None = None
    """Line of the field in the module source, for diagnostics."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SectionSpec:
    """A dataclass that becomes a TOML table."""

    name: str
    """The class name (``Training``, ``Encoder``)."""
    fields: tuple[FieldSpec, ...]
    """Fields in declaration order, inherited ones first (like ``dataclasses.fields``)."""
    doc: str | None = None
    """The class docstring, if any."""

    def field(self, name: str) -> FieldSpec | None:
        """Return the field called ``name``, or ``None``."""
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ExtensionSpec:
    """What a custom config module contributes: its ``JobConfig`` dataclass and where it came from."""

    module: str
    """The dotted module path as written in ``job.custom_config_module``."""
    root: SectionSpec
    """The module's ``JobConfig`` dataclass."""
    origin: str
    """Where it was read from: a file path, ``built-in`` or ``import``."""
    notes: tuple[str, ...] = ()
    """Things the static reader could not resolve (each becomes a warning)."""
