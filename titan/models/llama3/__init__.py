"""llama3: Llama 3 / 3.1 dense decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.llama3 import flavors
from titan.models.llama3.family import FAMILY
from titan.models.llama3.model_config import (
    Llama3Model,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names in torchtitan's order: debugmodel and 8B (each + flex/varlen), 70B, 405B."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of the llama3 ``flavor`` (e.g. ``"8B"``); ``ValueError`` if unknown."""
    return FAMILY.model_spec(flavor)


__all__ = ["FLAVORS", "Llama3Model", "model_registry"]
