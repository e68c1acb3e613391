"""qwen3: Qwen3 dense and mixture-of-experts decoders, every v0.2.2 flavor with its numbers."""

from __future__ import annotations

from titan.models.qwen3 import flavors
from titan.models.qwen3.family import FAMILY
from titan.models.qwen3.model_config import (
    Qwen3Attention,
    Qwen3Model,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: dense debugmodel to 32B, then the MoE ones."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of qwen3 ``flavor`` (e.g. ``"30B-A3B"``); ``ValueError`` if unknown."""
    return FAMILY.model_spec(flavor)


__all__ = [
    "FLAVORS",
    "Qwen3Attention",
    "Qwen3Model",
    "model_registry",
]
