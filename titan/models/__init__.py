"""titan's model families: one package per family, each with ``model_registry(flavor)``.

Importing this package imports no family (and never torch); ``model_registry(family, flavor)``
imports the one it is asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from titan.protocols.model_spec import Capabilities, ModelSpec

SUPPORTED_MODELS: tuple[str, ...] = ("deepseek_v3", "flux", "gpt_oss", "llama3", "llama4", "qwen3")
"""The model families titan describes, as torchtitan names them."""

FAMILY_ALIASES: dict[str, str] = {"llama3_ft": "llama3"}
"""Legacy ``model.name`` values that reuse another family's flavors (torchft's llama3)."""


def family_name(family: str) -> str:
    """The family ``family`` names (aliases resolved); ``ValueError`` with a hint if unknown."""
    name = FAMILY_ALIASES.get(family, family)
    if name not in SUPPORTED_MODELS:
        # Imported here: it loads titan.schemas.flavors, which ``import titan.models`` should not.
        from titan.models.common.registry import unknown_name

        raise unknown_name("model family", family, [*SUPPORTED_MODELS, *FAMILY_ALIASES])
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
    "model_registry",
    "unsupported_model",
]
