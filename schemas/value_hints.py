"""What to write instead of a value of the wrong type, or of a choice a setting does not have.

A value of the wrong type gets the value to write when its intent is plain (`"10"` for an
integer, `1` for a boolean, `"a,b"` for a list of strings), and only if that value would
itself be accepted: `converters = "float8"` is told `["quantize.linear.float8"]`, never
`["float8"]`, which is rejected too. A string outside a setting's choices is told the choice
it misspells, or every choice.
"""

from __future__ import annotations

from typing import Any

from titan.schemas.spec import SectionSpec

_NO_VALUE: Any = object()


def value_hint(
    parts: tuple[str, ...], value: Any, annotation: Any, document: dict | None = None
) -> str:
    """What to write instead of ``value`` at ``parts``, whose type is ``annotation``
    (``document``, the whole file, tells which model a flavor must belong to)."""
    from titan.schemas import eras, typecheck

    key = parts[-1]
    intended = _intended(value, annotation)
    if intended is not _NO_VALUE and typecheck.matches(intended, annotation):
        accepted = accepted_value(parts, intended, document)
        if accepted is not _NO_VALUE:
            return f"use `{key} = {eras.toml_value(accepted)}`{_because(value, accepted)}"
    return f"`{key}` takes {typecheck.type_name(annotation)}{_example(parts, annotation, document)}"


def choice_hint(parts: tuple[str, ...], value: str, choices: tuple) -> str:
    """For a string outside a setting's choices: the choice it misspells, or every choice
    (``"bfloat16"`` is no misspelling of ``"float32"``: naming it would change the run)."""
    from titan.schemas.misspelling import closest_one

    strings = [c for c in choices if isinstance(c, str)]
    meant = closest_one(value, strings)
    if meant is not None:
        return f'did you mean "{meant}"?'
    shown = ", ".join(f'"{c}"' for c in strings)
    if len(strings) == 1:
        return f"`{parts[-1]}` takes only {shown}"
    return f"`{parts[-1]}` is one of {shown}"


def _intended(value: Any, annotation: Any) -> Any:
    """The value the user most plainly meant, or ``_NO_VALUE``."""
    import types
    import typing

    from titan.schemas import typecheck

    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    if isinstance(value, str):
        parsed = _toml_scalar(value)
        if parsed is not _NO_VALUE and not isinstance(parsed, str):
            return parsed  # "10", "true", "1e-4"
        lists = [m for m in members if typing.get_origin(m) is list]
        if lists:
            inner = typing.get_args(lists[0])[:1]
            items = [part.strip() for part in value.split(",") if part.strip()]
            if not inner or all(typecheck.matches(item, inner[0]) for item in items):
                return items
    if isinstance(value, int) and not isinstance(value, bool) and bool in members:
        return bool(value) if value in (0, 1) else _NO_VALUE
    if isinstance(value, float) and value.is_integer() and int in members:
        return int(value)
    if isinstance(value, list) and len(value) == 1 and str in members:
        return value[0] if isinstance(value[0], str) else _NO_VALUE
    if isinstance(value, int | float) and not isinstance(value, bool) and str in members:
        return str(value)
    if not isinstance(value, list | dict) and any(typing.get_origin(m) is list for m in members):
        return [value]
    return _NO_VALUE


def accepted_value(parts: tuple[str, ...], value: Any, document: dict | None = None) -> Any:
    """``value`` as the check would accept it at ``parts``, or ``_NO_VALUE`` when it would be
    rejected anyway (out of range, a converter, model or flavor titan does not know). Stale
    converter names become the names v0.2.2 registers."""
    from titan.schemas import ranges, rules
    from titan.schemas.legacy_spec import LEGACY_RANGES

    dotted = ".".join(parts)
    if ranges.problem(value, LEGACY_RANGES.get(dotted)) is not None:
        return _NO_VALUE
    if dotted == "model.converters":
        names = [rules.STALE_CONVERTER_NAMES.get(name, name) for name in value]
        known = all(name in rules.CONVERTER_NAMES for name in names)
        one_family = len({name.rsplit(".", 1)[-1] for name in names}) <= 1
        return names if known and one_family else _NO_VALUE
    if dotted in ("model.name", "model.flavor"):
        from titan.schemas import flavors

        model = (document or {}).get("model")
        name = model.get("name", "llama3") if isinstance(model, dict) else "llama3"
        known = (
            flavors.flavor_names(value) is not None
            if dotted == "model.name"
            else value in (flavors.flavor_names(name) or ())
        )
        return value if known else _NO_VALUE
    return value


def _toml_scalar(text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {text.strip()}")["v"]
    except (tomllib.TOMLDecodeError, ValueError):
        return _NO_VALUE


def _because(value: Any, accepted: Any) -> str:
    """Why the value changed, in a few words."""
    if isinstance(value, str) and not isinstance(accepted, str | list):
        return ": without quotes"
    if isinstance(value, str) and isinstance(accepted, list):
        written = [part.strip() for part in value.split(",")]
        renamed = [f'"{new}"' for old, new in zip(written, accepted, strict=False) if old != new]
        return ": a TOML array" + (
            f" (with the names v0.2.2 registers: {', '.join(renamed)})" if renamed else ""
        )
    if isinstance(accepted, bool):
        return ": TOML's booleans are true and false"
    if isinstance(value, list):
        return ": one string, not an array"
    return ""


def _example(parts: tuple[str, ...], annotation: Any, document: dict | None) -> str:
    """What values look like: the registered converters, the model's flavors, or the schema's
    default (`` (the default is `steps = 10000`)``)."""
    from titan.schemas import eras, flavors, rules, typecheck
    from titan.schemas.spec import MISSING

    dotted = ".".join(parts)
    if dotted == "model.converters":
        return ": the registered converters are " + ", ".join(
            f'"{name}"' for name in rules.CONVERTER_NAMES
        )
    if dotted == "model.flavor":
        model = (document or {}).get("model")
        name = model.get("name", "llama3") if isinstance(model, dict) else "llama3"
        names = flavors.flavor_names(name) if isinstance(name, str) else None
        if names:
            return f": {name}'s flavors are " + ", ".join(f'"{n}"' for n in names)

    from titan.schemas.legacy_spec import LEGACY_SPEC

    section: Any = LEGACY_SPEC
    field = None
    for part in parts:
        field = section.field(part) if isinstance(section, SectionSpec) else None
        if field is None:
            return ""
        section = field.annotation
    if field is None or field.default is MISSING or field.default is None:
        return ""
    if not typecheck.matches(field.default, annotation):
        return ""
    return f" (the default is `{parts[-1]} = {eras.toml_value(field.default)}`)"
