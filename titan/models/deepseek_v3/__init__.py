"""deepseek_v3: DeepSeek V2/V3 style MoE decoders, every v0.2.2 flavor with its numbers."""

from __future__ import annotations

from titan.models.deepseek_v3 import flavors
from titan.models.deepseek_v3.family import FAMILY
from titan.models.deepseek_v3.model_config import (
    DeepSeekV3Model,
    DeepSeekV3TransformerBlock,
    MLAttention,
    YaRNRoPE,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: debugmodel (+ flex), 16B, 236B, 671B."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of deepseek_v3 ``flavor`` (e.g. ``"671B"``); ValueError if unknown."""
    return FAMILY.model_spec(flavor)


__all__ = [
    "FLAVORS",
    "DeepSeekV3Model",
    "DeepSeekV3TransformerBlock",
    "MLAttention",
    "YaRNRoPE",
    "model_registry",
]
