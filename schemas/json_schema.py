"""JSON Schema of the legacy TOML format, for editors (Taplo / "Even Better TOML") and CI tools.

The schema comes from pydantic: the built-in models of ``titan.schemas.legacy``, or, with extensions,
models built from the merged :class:`SectionSpec` tree. References are inlined and the result is
draft-07, which every TOML language server understands.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from titan.schemas.legacy_spec import LEGACY_RANGES
from titan.schemas.spec import MISSING, SectionSpec

DRAFT = "http://json-schema.org/draft-07/schema#"


class _ExtensionSection(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


def model_from_spec(spec: SectionSpec, *, prefix: str = "") -> type[BaseModel]:
    """A strict pydantic model equivalent to ``spec`` (for merged schemas with extensions)."""
    fields: dict[str, Any] = {}
    for field in spec.fields:
        # Field names such as `json` or `validate` would shadow BaseModel methods: use aliases.
        attribute = f"f_{field.name}"
        if isinstance(field.annotation, SectionSpec):
            nested = model_from_spec(field.annotation, prefix=f"{prefix}{field.name}.")
            info = Field(default_factory=nested, alias=field.name, description=field.doc)
            fields[attribute] = (nested, info)
        else:
            default = ... if field.default is MISSING else field.default
            bounds = LEGACY_RANGES.get(f"{prefix}{field.name}")
            constraints = bounds.pydantic_kwargs() if bounds is not None else {}
            info = Field(default=default, alias=field.name, description=field.doc, **constraints)
            fields[attribute] = (field.annotation, info)
    name = spec.name if not prefix else f"{prefix}{spec.name}".replace(".", "_")
    return create_model(name, __base__=_ExtensionSection, __doc__=spec.doc, **fields)


_BOUND_KEYWORDS = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
}
"""pydantic leaves a bound on a union (``float | int``) under its own name, which is no JSON
Schema keyword; it belongs on each numeric alternative."""


def _union_bounds(node: Any) -> Any:
    if isinstance(node, list):
        return [_union_bounds(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _union_bounds(v) for k, v in node.items()}
    stray = {k: node.pop(k) for k in list(node) if k in _BOUND_KEYWORDS and "anyOf" in node}
    for option in node.get("anyOf", ()):
        if option.get("type") in ("number", "integer"):
            option.update({_BOUND_KEYWORDS[k]: v for k, v in stray.items()})
    return node


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **siblings}, defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def json_schema(spec: SectionSpec | None = None) -> dict[str, Any]:
    """The JSON Schema document: the built-in schema, or ``spec`` when extensions were merged."""
    if spec is None:
        from titan.schemas.legacy import JobConfig

        raw = JobConfig.model_json_schema(by_alias=True)
    else:
        raw = model_from_spec(spec).model_json_schema(by_alias=True)
    defs = raw.pop("$defs", {})
    schema = _union_bounds(_inline(raw, defs))
    return {
        "$schema": DRAFT,
        "$id": "https://titan-tools.dev/schemas/torchtitan-v0.2.2-job.schema.json",
        **schema,
        "title": "torchtitan v0.2.2 job config",
        "description": "A legacy torchtitan JobConfig TOML (v0.2.2), as checked by titan-validate.",
    }


def json_schema_text(spec: SectionSpec | None = None) -> str:
    """The schema as pretty JSON (stable key order, trailing newline)."""
    return json.dumps(json_schema(spec), indent=2, ensure_ascii=False) + "\n"
