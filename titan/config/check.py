"""Check a registry-made ``Trainer.Config``: every field's type, then the shared cross-field rules.

Dataclasses accept any value (``TrainingConfig(steps="10")`` constructs fine), so each field is
validated with pydantic in strict mode against its annotation, and a config object carrying an
attribute that is not a field (possible only on a class that forgot ``slots=True``) is reported.
Numbers are then checked against the legacy schema's ranges (``titan.schemas.ranges``, mapped to the
registry fields through ``titan.migrate.plan.homes``). The cross-field rules are the ones
``titan-validate FILE.toml`` runs (``titan.schemas.rules``), fed with a
:class:`~titan.schemas.rule_facts.ConfigFacts` built from the config object
(``titan.config.registry_facts``).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterator
from typing import Any

from titan.config.configurable import Configurable, check_config_class, field_ranges
from titan.config.registry_facts import Locate, config_facts, config_nodes
from titan.schemas import ranges, rules
from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec


def check_config(config: Any, *, ngpu: int | None, locate: Locate) -> list[Diagnostic]:
    """Every problem of ``config``: types, structure and ranges (a field's type error stands
    for its range), then, when every value is well typed, the cross-field rules."""
    found = list(_structure(config, "", locate))
    if getattr(config, "model_spec", None) is None:
        found.append(
            _diag(
                "unknown-model",
                "model_spec",
                "the config has no model: model_spec is not set",
                locate,
                "set model_spec=model_registry(flavor) from the model family's package",
            )
        )
    wrong = {d.path for d in found}
    well_typed = not any(d.severity is Severity.ERROR for d in found)
    found += (d for d in _out_of_range(config, locate) if d.path not in wrong)
    if not well_typed:
        return found  # the cross-field rules assume well-typed values
    found += rules.check(config_facts(config, ngpu=ngpu, locate=locate))
    # A config class with rules of its own (a policy trainer's) adds their findings.
    own_rules = getattr(config, "rule_findings", None)
    return found + (list(own_rules(locate)) if callable(own_rules) else [])


_ABSENT = object()


def _out_of_range(config: Any, locate: Locate) -> Iterator[Diagnostic]:
    """The legacy schema's ranges (``titan.schemas.ranges``), at the fields the keys migrate to, then
    the ranges titan's config classes declare (``_ranges``) at every other field."""
    checked = set()
    for path, bounds in _range_paths():
        node = config
        for part in path.split("."):
            node = getattr(node, part, _ABSENT)
        if node is _ABSENT:
            continue  # a field of a trainer subclass this config is not
        checked.add(path)
        finding = ranges.out_of_range(node, bounds, path=path, span=locate(path))
        if finding is not None:
            yield finding
    for node, prefix in config_nodes(config, ""):
        for name, bounds in field_ranges(type(node)).items():
            path = _join(prefix, name)
            if path in checked:
                continue
            finding = ranges.out_of_range(getattr(node, name), bounds, path=path, span=locate(path))
            if finding is not None:
                yield finding


def _config_nodes(node: Any, path: str) -> Iterator[tuple[Any, str]]:
    """Every config object in the tree under ``node`` (list items too), with its path."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield node, path
        for field in dataclasses.fields(node):
            yield from _config_nodes(getattr(node, field.name), _join(path, field.name))
    elif isinstance(node, list | tuple):
        for index, item in enumerate(node):
            yield from _config_nodes(item, f"{path}[{index}]")


@functools.cache
def _range_paths() -> tuple[tuple[str, ranges.Range | None], ...]:
    """(registry path, range) for every numeric legacy key that has a field in Trainer.Config:
    the table is keyed by legacy key and mapped through the migration's homes."""
    from titan.migrate.plan import homes
    from titan.schemas.legacy_spec import LEGACY_RANGES

    found = {}
    for key in _numeric_leaves(LEGACY_SPEC, ""):
        home = homes.home(key)
        if home is None or home.kind not in ("same", "moved") or home.path is None:
            continue
        for path in (home.path, *home.also):
            found[path] = LEGACY_RANGES.get(key)
    return tuple(found.items())


def _numeric_leaves(section: SectionSpec, prefix: str) -> Iterator[str]:
    for item in section.fields:
        if isinstance(item.annotation, SectionSpec):
            yield from _numeric_leaves(item.annotation, f"{prefix}{item.name}.")
        elif {int, float} & {item.annotation, *typing.get_args(item.annotation)}:
            yield f"{prefix}{item.name}"


def _diag(code: str, path: str, message: str, locate: Locate, hint: str | None = None):
    return Diagnostic(
        code=code,
        severity=Severity.ERROR,
        path=path,
        message=message,
        hint=hint,
        span=locate(path),
    )


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _adapter(annotation: Any):
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(annotation, config=ConfigDict(strict=True))


def _dataclass_types(annotation: Any) -> tuple[type, ...]:
    """The dataclass classes an annotation admits (``X``, ``X | None``, ``list[X]`` elements)."""
    try:
        return _cached_dataclass_types(annotation)
    except TypeError:  # an unhashable annotation
        return _find_dataclass_types(annotation)


@functools.cache
def _cached_dataclass_types(annotation: Any) -> tuple[type, ...]:
    return _find_dataclass_types(annotation)


def _find_dataclass_types(annotation: Any) -> tuple[type, ...]:
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return (annotation,)
    return tuple(t for arg in typing.get_args(annotation) for t in _dataclass_types(arg))


def _structure(node: Any, path: str, locate: Locate) -> Iterator[Diagnostic]:
    cls = type(node)
    if issubclass(cls, Configurable.Config):
        try:
            check_config_class(cls)
        except TypeError as exc:
            yield _diag(
                "wrong-type",
                path,
                str(exc),
                locate,
                "config classes are dataclasses with kw_only=True and slots=True; fix the class",
            )
    extra = getattr(node, "__dict__", None)
    for name in extra or ():
        yield _diag(
            "unknown-key",
            _join(path, name),
            f"{cls.__qualname__} has no field `{name}`",
            locate,
            _suggest(name, [f.name for f in dataclasses.fields(node)])
            or "fields: " + ", ".join(f.name for f in dataclasses.fields(node)),
        )
    hints = _hints(cls)
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        annotation = hints[field.name]
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        yield from _value(value, annotation, _join(path, field.name), locate)


def _value(value: Any, annotation: Any, path: str, locate: Locate) -> Iterator[Diagnostic]:
    classes = _dataclass_types(annotation)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if classes and not isinstance(value, classes):
            expected = " or ".join(c.__qualname__ for c in classes)
            yield _diag(
                "wrong-type",
                path,
                f"`{path}` must be a {expected}, not a {type(value).__qualname__}",
                locate,
                f"build it with {classes[0].__qualname__}(...)",
            )
            return
        yield from _structure(value, path, locate)
        return
    if classes and isinstance(value, list | tuple):
        element_classes = tuple(c for c in classes)
        for index, item in enumerate(value):
            item_path = f"{path}[{index}]"
            if not isinstance(item, element_classes):
                expected = " or ".join(c.__qualname__ for c in element_classes)
                yield _diag(
                    "wrong-type",
                    item_path,
                    f"`{item_path}` must be a {expected}, not {type(item).__qualname__}",
                    locate,
                    f"build each item with {element_classes[0].__qualname__}(...)",
                )
            else:
                yield from _structure(item, item_path, locate)
        return
    if classes:  # a config-typed field holding something else
        if value is None and type(None) in typing.get_args(annotation):
            return
        expected = " or ".join(c.__qualname__ for c in classes)
        yield _diag(
            "wrong-type",
            path,
            f"`{path}` must be a {expected}, not {ranges.shown_value(value)}",
            locate,
            f"build it with {classes[0].__qualname__}(...)",
        )
        return
    from pydantic import ValidationError

    try:
        _adapter(annotation).validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p!r}]" for p in first["loc"] if not isinstance(p, str))
        yield _diag(
            "invalid-choice" if first["type"] == "literal_error" else "wrong-type",
            path + where,
            f"`{path}` is {ranges.shown_value(value)}: {first['msg'][0].lower()}{first['msg'][1:]}",
            locate,
            f"`{path.rpartition('.')[2]}` takes {_describe(annotation)} (no conversion is done)",
        )


def _describe(annotation: Any) -> str:
    """An annotation in words: ``int``, ``one of "op", "full"``, ``str or None``."""
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return f"a value of type {annotation.__name__}"
    text = str(annotation).replace("typing.", "")
    return f"a value of type {text}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _suggest(name: str, names: list[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None
