"""titan's model families: one package per family, each with ``model_registry(flavor)``.

Importing this package imports no family (and never torch); ``model_registry(family, flavor)``
imports the one it is asked for.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import pkgutil
from typing import Any

from titan.protocols.model_spec import Capabilities, ModelSpec

RECORD_MODULE = "family"
"""The module of a family package that holds its record (``FAMILY``, a
``titan.models.common.model_family.ModelFamily``); a package without one is no family (``common``)."""


def family_names(path: list[str] | None = None) -> tuple[str, ...]:
    """The families: the packages in ``path`` (default: this package's folder) that have a
    ``family.py``, sorted. Reads folder names only; imports nothing."""
    found = []
    for package in pkgutil.iter_modules(__path__ if path is None else path):
        folder = getattr(package.module_finder, "path", None)
        if package.ispkg and folder is not None:
            inside = pkgutil.iter_modules([os.path.join(folder, package.name)])
            if any(module.name == RECORD_MODULE for module in inside):
                found.append(package.name)
    return tuple(sorted(found))


SUPPORTED_MODELS: tuple[str, ...] = family_names()
"""The model families titan describes, as torchtitan names them: the folders of this package
that declare a family (``<family>/family.py``), sorted. Every other list of families (the
validator's and the migrator's generated table, the tests) is read from this one."""


def family_record(family: str) -> Any:
    """The ``ModelFamily`` record of ``family`` (a name of ``SUPPORTED_MODELS``)."""
    record = importlib.import_module(f"{__name__}.{family}.{RECORD_MODULE}").FAMILY
    if getattr(record, "name", None) != family:
        raise TypeError(f"{__name__}.{family}.{RECORD_MODULE}.FAMILY is not the {family} family")
    return record


@functools.cache
def _aliases() -> dict[str, str]:
    """Legacy ``model.name`` -> the family whose flavors it reuses (torchft's ``llama3_ft``),
    from every family's record."""
    records = [family_record(family) for family in SUPPORTED_MODELS]
    return {alias: record.name for record in records for alias in record.aliases}


def __getattr__(name: str) -> object:
    """``FAMILY_ALIASES``, read from the records when first asked for: ``import titan.models``
    imports no family."""
    if name == "FAMILY_ALIASES":
        return dict(_aliases())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def family_name(family: str) -> str:
    """The family ``family`` names (aliases resolved); ``ValueError`` with a hint if unknown."""
    aliases = _aliases()
    name = aliases.get(family, family)
    if name not in SUPPORTED_MODELS:
        # Imported here: it loads titan.schemas.flavors, which ``import titan.models`` should not.
        from titan.models.common.registry import unknown_name

        raise unknown_name("model family", family, [*SUPPORTED_MODELS, *aliases])
    return name


def model_registry(family: str, flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of ``flavor`` of ``family`` (e.g. ``"llama3", "8B"``)."""
    package = importlib.import_module(f"{__name__}.{family_name(family)}")
    return package.model_registry(flavor)


def extend_model(spec: ModelSpec, config_class: type, /, **fields: Any) -> ModelSpec:
    """``spec`` with its model config re-made as ``config_class``, setting ``fields``.

    ``config_class`` is a subclass of the spec's model config class that adds a fork's own
    fields (titan-migrate writes one for the ``[model]`` keys of a custom config module): every
    field of the registry's config keeps its value and the fork's fields get ``fields``, so the
    fork's model code reads them from ``spec.model`` like any other. ``spec`` and
    ``config_class`` are positional-only, so no fork field name can clash with them. A
    ``TypeError`` names both classes when ``config_class`` does not extend the spec's: a model
    registry that builds another config class must declare the fields in that class itself.
    """
    base = type(spec.model)
    if not (isinstance(config_class, type) and issubclass(config_class, base)):
        raise TypeError(
            f"extend_model: {getattr(config_class, '__qualname__', config_class)!r} does not "
            f"extend {base.__module__}.{base.__qualname__}, the model config that "
            f"{spec.name} {spec.flavor!r} builds; declare the fork's model fields in that class "
            "(or a subclass of it) instead"
        )
    kept = {f.name: getattr(spec.model, f.name) for f in dataclasses.fields(spec.model) if f.init}
    return dataclasses.replace(spec, model=config_class(**{**kept, **fields}))


def unsupported_model(name: str, flavor: str) -> ModelSpec:
    """A model titan has no family for (a torchtitan experiment such as ``vlm``), by name only.

    Migrating such a TOML keeps the legacy ``model.name`` and ``model.flavor`` instead of
    dropping them; the config validates, and building the model refuses with this reason."""
    from titan.protocols.module import BaseModel

    return ModelSpec(
        name=name,
        flavor=flavor,
        model=BaseModel.Config(),
        capabilities=Capabilities(
            training_refusal=f"titan has no `{name}` model family; pick one of "
            + ", ".join(SUPPORTED_MODELS)
        ),
    )


__all__ = [
    "FAMILY_ALIASES",
    "SUPPORTED_MODELS",
    "extend_model",
    "family_name",
    "family_names",
    "family_record",
    "model_registry",
    "unsupported_model",
]
