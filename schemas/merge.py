"""Merging a custom config module's ``JobConfig`` into the legacy schema.

Same rules as v0.2.2's ``ConfigManager._merge_configs`` (manager_behaviour.md §3): a field present
in both with section types on both sides is merged recursively; otherwise the custom field replaces
the base field wholesale (type and default, silently); fields only in the custom class are appended.
"""

from __future__ import annotations

from titan.schemas.spec import FieldSpec, SectionSpec


def merge_sections(base: SectionSpec, custom: SectionSpec) -> SectionSpec:
    """The merged section: base fields in base order (merged or replaced), then custom-only ones."""
    custom_by_name = {field.name: field for field in custom.fields}
    merged: list[FieldSpec] = []
    for field in base.fields:
        replacement = custom_by_name.pop(field.name, None)
        if replacement is None:
            merged.append(field)
        elif isinstance(field.annotation, SectionSpec) and isinstance(
            replacement.annotation, SectionSpec
        ):
            section = merge_sections(field.annotation, replacement.annotation)
            doc = replacement.doc or field.doc
            merged.append(
                FieldSpec(name=field.name, annotation=section, default=field.default, doc=doc)
            )
        else:
            merged.append(replacement)
    merged.extend(custom_by_name.values())
    return SectionSpec(name=base.name, fields=tuple(merged), doc=base.doc)
