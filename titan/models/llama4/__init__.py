"""llama4: Llama 4 MoE decoders, every v0.2.2 flavor with its hyperparameters.

The ``*_irope`` flavors were removed from torchtitan after v0.2.2; titan keeps them so that a
legacy config naming one still migrates without loss.
"""

from __future__ import annotations

from titan.models.llama4 import flavors
from titan.models.llama4.family import FAMILY
from titan.models.llama4.model_config import (
    Llama4Attention,
    Llama4Model,
    Llama4TransformerBlock,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names in torchtitan's order: debugmodel, 17bx16e, 17bx128e, then their _irope twins."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of llama4 ``flavor`` (e.g. ``"17bx16e"``); ValueError if unknown."""
    return FAMILY.model_spec(flavor)


__all__ = [
    "FLAVORS",
    "Llama4Attention",
    "Llama4Model",
    "Llama4TransformerBlock",
    "model_registry",
]
