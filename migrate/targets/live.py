"""The live renderer: a migration plan instantiated into titan config objects in memory.

``titan-train --job.config_file x.toml`` trains what this returns, and ``titan-validate`` runs the
registry-side checks on it. The code renderer (``migrate/codegen/render_code.py``) writes the very
same constructor calls as source: both pass only the fields that differ from each class' defaults
(:func:`changed_fields`), so the generated registry function and the live config are equal by
construction, and the tests compare them field by field anyway.

This module imports titan (torch-free config classes) when it runs, never at import time, and
the user's code the project declares for its runs (a model registry, a converter class) only when
it builds a config that names it: that is what ``titan-train --job.config_file`` asks for.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from titan.migrate.plan.extension_classes import GeneratedClass, is_generated
from titan.migrate.plan.legacy_values import copy_value
from titan.migrate.plan.migration_plan import Plan
from titan.migrate.targets.config_objects import (
    Default,
    Obj,
    RegistryCall,
    UnsupportedModel,
    changed_fields,
)
from titan.migrate.targets.spec_types import load_class


class PlanError(Exception):
    """The plan has no config (the TOML could not be read or parsed)."""


def instantiate(plan: Plan) -> Any:
    """The plan's config as titan objects (a fresh tree on every call)."""
    if plan.root is None:
        raise PlanError(f"{plan.source}: no config to build (see the diagnostics)")
    classes = build_classes(plan.classes, plan.extension)
    return _make(plan.root, classes)


_CLASS_CACHE: dict[tuple, type] = {}


def build_classes(generated: list[GeneratedClass], module: str | None) -> dict[str, type]:
    """Real dataclasses for the plan's generated classes, keyed by class path.

    Built once per distinct definition, so two configs migrated from the same custom module in
    one process share their classes (and compare equal)."""
    from titan.migrate.plan.extension_classes import generated_path

    classes: dict[str, type] = {}
    for spec in generated:
        path = generated_path(module or "", spec.name)
        key = (path, spec.base, spec.doc, tuple(_field_key(f) for f in spec.fields))
        if key not in _CLASS_CACHE:
            _CLASS_CACHE[key] = _make_class(spec, classes)
        classes[path] = _CLASS_CACHE[key]
    return classes


def _field_key(spec: Any) -> tuple:
    default = spec.default
    if isinstance(default, Default):
        default = ("Default", default.cls)
    return (spec.name, repr(spec.annotation), repr(default), spec.doc)


def _make_class(spec: GeneratedClass, classes: dict[str, type]) -> type:
    fields = []
    for item in spec.fields:
        annotation = item.annotation
        if isinstance(annotation, str) and is_generated(annotation):
            annotation = classes[annotation]
        fields.append((item.name, annotation, _field_default(item.default, classes)))
    bases = (load_class(spec.base),) if spec.base else ()
    cls = dataclasses.make_dataclass(
        spec.name,
        fields,
        bases=bases,
        kw_only=True,
        slots=True,
        namespace={"__doc__": spec.doc},
    )
    cls.__module__ = __name__
    return cls


def _field_default(default: Any, classes: dict[str, type]) -> Any:
    if isinstance(default, Default):
        return dataclasses.field(default_factory=classes[default.cls])
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda value=default: copy_value(value))
    return dataclasses.field(default=default)


def _make(value: Any, classes: dict[str, type]) -> Any:
    if isinstance(value, Obj):
        cls = classes[value.cls] if is_generated(value.cls) else load_class(value.cls)
        kwargs = {name: _make(v, classes) for name, v in changed_fields(value).items()}
        return cls(**kwargs)
    if isinstance(value, RegistryCall):
        package = importlib.import_module(value.package)
        kwargs = {name: _make(v, classes) for name, v in value.kwargs.items()}
        spec = package.model_registry(value.flavor, **kwargs)
        if value.model is not None:
            from titan.models import extend_model

            fields = {name: _make(v, classes) for name, v in changed_fields(value.model).items()}
            spec = extend_model(spec, classes[value.model.cls], **fields)
        for edit in value.edits:
            *parents, name = edit.path.split(".")
            items = [spec.model] if edit.each is None else _get(spec.model, edit.each)
            for node in items:
                for part in parents:
                    node = getattr(node, part)
                setattr(node, name, copy_value(edit.value))
        return spec
    if isinstance(value, UnsupportedModel):
        from titan.models import unsupported_model

        return unsupported_model(value.name, value.flavor)
    if isinstance(value, list):
        return [_make(v, classes) for v in value]
    if isinstance(value, dict):
        return {k: _make(v, classes) for k, v in value.items()}
    return value


def _get(obj: Any, path: str) -> Any:
    """The attribute at a dotted ``path`` below ``obj``."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj
