"""titan's model families: one package per family, each with ``model_registry(flavor)``.

Importing this package imports no family (and never torch); ``model_registry(family, flavor)``
imports the one it is asked for.
"""

from __future__ import annotations

import importlib

from titan.protocols.model_spec import Capabilities, ModelSpec

SUPPORTED_MODELS: tuple[str, ...] = ("deepseek_v3", "flux", "gpt_oss", "llama3", "llama4", "qwen3")
"""The model families titan describes, as torchtitan names them."""

FAMILY_ALIASES: dict[str, str] = {"llama3_ft": "llama3"}
"""Legacy ``model.name`` values that reuse another family's flavors (torchft's llama3)."""


def family_name(family: str) -> str:
    """The family ``family`` names (aliases resolved); ``ValueError`` with a hint if unknown."""
    name = FAMILY_ALIASES.get(family, family)
    if name not in SUPPORTED_MODELS:
        # Imported here: it loads schemas.flavors, which ``import titan.models`` should not.
        from titan.models.common.registry import unknown_name

        raise unknown_name("model family", family, [*SUPPORTED_MODELS, *FAMILY_ALIASES])
    return name


def model_registry(family: str, flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of ``flavor`` of ``family`` (e.g. ``"llama3", "8B"``)."""
    package = importlib.import_module(f"{__name__}.{family_name(family)}")
    return package.model_registry(flavor)


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
    "family_name",
    "model_registry",
    "unsupported_model",
]
