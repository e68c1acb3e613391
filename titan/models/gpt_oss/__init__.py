"""gpt_oss: gpt-oss MoE decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.common.registry import deferred_training, family_flavors, flavor_model_spec
from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssRoPE,
    config_from_args,
    flavor_args,
)
from titan.protocols.model_spec import Capabilities, ModelSpec

FLAVORS: tuple[str, ...] = family_flavors("gpt_oss")
"""Flavor names, in torchtitan's order: debugmodel, 20b, 120b."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of gpt_oss ``flavor`` (e.g. ``"20b"``); ``ValueError`` if unknown."""
    return flavor_model_spec(
        "gpt_oss",
        flavor,
        config_from_args=config_from_args,
        capabilities=Capabilities(training_refusal=deferred_training("gpt_oss")),
    )


__all__ = [
    "FLAVORS",
    "GptOssAttention",
    "GptOssMoE",
    "GptOssModel",
    "GptOssRoPE",
    "config_from_args",
    "flavor_args",
    "model_registry",
]
