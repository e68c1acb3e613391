"""A neutral description of config sections, shared by the static reader and the schema builder.

A custom ``job.custom_config_module`` is described as a tree of :class:`SectionSpec` whether it was
read from source (the default, nothing is executed) or imported (``--allow-import``). The schema
builder merges such a tree into the built-in legacy models with the rules of v0.2.2's
``ConfigManager._merge_configs``.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set


class _Missing:
    """The type of :data:`MISSING` (one instance, kept by copy, deepcopy and pickle)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Marks a field whose default could not be determined (or that has none).

Our own sentinel, not ``dataclasses.MISSING``: importing ``dataclasses`` costs more than a whole
validation run. Readers of real dataclasses translate ``dataclasses.MISSING`` to this."""


class FieldSpec(Frozen):
    """One dataclass field: its name, type, default and one-line documentation."""

    __slots__ = ("name", "annotation", "default", "doc", "line")
    __match_args__ = ()

    name: str
    """The field name as written in the dataclass (and in TOML)."""
    annotation: Any
    """A typing object (``int``, ``list[str]``, ``Literal[...]``, ``X | None``), a nested
    :class:`SectionSpec`, or ``typing.Any`` when the type could not be resolved statically."""
    default: Any
    """The default value (already evaluated, e.g. ``[]`` for ``default_factory=list``)."""
    doc: str | None
    """The docstring written under the field, if any."""
    line: int | None
    """Line of the field in the module source, for diagnostics."""

    def __init__(
        self,
        *,
        name: str,
        annotation: Any,
        default: Any,  # required, as it was in the dataclass (a default of MISSING meant none)
        doc: str | None = None,
        line: int | None = None,
    ) -> None:
        _set(self, "name", name)
        _set(self, "annotation", annotation)
        _set(self, "default", default)
        _set(self, "doc", doc)
        _set(self, "line", line)


class SectionSpec(Frozen):
    """A dataclass that becomes a TOML table."""

    __slots__ = ("name", "fields", "doc", "_by_name")
    __match_args__ = ()

    name: str
    """The class name (``Training``, ``Encoder``)."""
    fields: tuple[FieldSpec, ...]
    """Fields in declaration order, inherited ones first (like ``dataclasses.fields``)."""
    doc: str | None
    """The class docstring, if any."""

    def __init__(self, *, name: str, fields: tuple[FieldSpec, ...], doc: str | None = None) -> None:
        _set(self, "name", name)
        _set(self, "fields", fields)
        _set(self, "doc", doc)
        _set(self, "_by_name", None)

    def _values(self) -> tuple:
        return (self.name, self.fields, self.doc)  # the lookup table is a cache, not a field

    def __repr__(self) -> str:
        return f"SectionSpec(name={self.name!r}, fields={self.fields!r}, doc={self.doc!r})"

    def __getstate__(self) -> tuple:
        return self._values()

    def __setstate__(self, state: tuple) -> None:
        self.__init__(name=state[0], fields=state[1], doc=state[2])  # type: ignore[misc]

    def field(self, name: str) -> FieldSpec | None:
        """Return the field called ``name``, or ``None``."""
        by_name = self._by_name
        if by_name is None:
            # Built on first use: the checker looks up every key of every file here.
            by_name = {}
            for spec in self.fields:
                by_name.setdefault(spec.name, spec)
            _set(self, "_by_name", by_name)
        return by_name.get(name)


def schema_paths(spec: SectionSpec, prefix: str = "") -> dict[str, bool]:
    """Every dotted path of the schema, mapped to whether it is a section."""
    paths: dict[str, bool] = {}
    for field in spec.fields:
        path = prefix + field.name
        is_section = isinstance(field.annotation, SectionSpec)
        paths[path] = is_section
        if is_section:
            paths.update(schema_paths(field.annotation, path + "."))
    return paths


class ExtensionSpec(Frozen):
    """What a custom config module contributes: its ``JobConfig`` dataclass and where it came from."""

    __slots__ = ("module", "root", "origin", "notes")
    __match_args__ = ()

    module: str
    """The dotted module path as written in ``job.custom_config_module``."""
    root: SectionSpec
    """The module's ``JobConfig`` dataclass."""
    origin: str
    """Where it was read from: a file path, ``built-in`` or ``import``."""
    notes: tuple[str, ...]
    """Things the static reader could not resolve (each becomes a warning)."""

    def __init__(
        self, *, module: str, root: SectionSpec, origin: str, notes: tuple[str, ...] = ()
    ) -> None:
        _set(self, "module", module)
        _set(self, "root", root)
        _set(self, "origin", origin)
        _set(self, "notes", notes)

    @property
    def file(self) -> str | None:
        """The module's source file; None for a built-in one or one imported without a file."""
        return None if self.origin in ("built-in", "import") else self.origin
