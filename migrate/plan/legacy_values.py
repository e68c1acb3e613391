"""A legacy TOML's values as the plan reads them: dotted leaves, schema defaults, copies, and
the short form findings quote.

Shared by the plan's steps and by the renderers and targets that read a plan's values.
"""

from __future__ import annotations

from typing import Any

from titan.schemas.spec import MISSING, SectionSpec


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted leaf key -> value (arrays of tables stay values of their key)."""
    leaves: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            if not value:
                leaves[f"{prefix}{key}"] = value  # an empty table is still an input key
            leaves |= flatten(value, f"{prefix}{key}.")
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def schema_default(schema: SectionSpec, key: str) -> Any:
    """The default of a dotted key in ``schema`` (``MISSING`` for a key it does not have)."""
    section: Any = schema
    spec = None
    for part in key.split("."):
        spec = section.field(part) if isinstance(section, SectionSpec) else None
        if spec is None:
            return MISSING
        section = spec.annotation
    return spec.default


def copy_value(value: Any) -> Any:
    """A deep copy of a TOML value (so two homes never share one list)."""
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    return value


def show(value: Any) -> str:
    """A value as findings and TODOs quote it: its ``repr``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
