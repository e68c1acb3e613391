"""gpt_oss: gpt-oss MoE decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.gpt_oss import flavors
from titan.models.gpt_oss.family import FAMILY
from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssRoPE,
    GptOssTransformerBlock,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: debugmodel, 20b, 120b."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of gpt_oss ``flavor`` (e.g. ``"20b"``); ``ValueError`` if unknown."""
    return FAMILY.model_spec(flavor)


__all__ = [
    "FLAVORS",
    "GptOssAttention",
    "GptOssMoE",
    "GptOssModel",
    "GptOssRoPE",
    "GptOssTransformerBlock",
    "model_registry",
]
