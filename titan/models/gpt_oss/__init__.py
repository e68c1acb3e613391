"""gpt_oss: gpt-oss MoE decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.common.registry import family_flavors, flavor_model_spec
from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssRoPE,
    GptOssTransformerBlock,
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
        # Proved by tests/test_gpt_oss_*: one-process training (both config forms, bitwise),
        # activation checkpointing, Hugging Face import/export. No TP/EP plan yet (torchtitan's
        # shards heads, sinks and experts); FSDP/DDP/compile/float8 are not tested for gpt_oss.
        capabilities=Capabilities(activation_checkpoint=True, hf_checkpoints=True),
        build_loss_fn="titan.components.loss:build_cross_entropy_loss",
        # llama3's function is the generic AC/compile/FSDP until titan.distributed has its own;
        # its TP plan never runs here, since tp is off in the capabilities.
        parallelize_fn="titan.models.llama3.parallelize:parallelize_llama",
        post_optimizer_build_fn="titan.models.common.moe_balance:register_moe_load_balancing",
        state_dict_adapter="titan.models.gpt_oss.state_dict_adapter:GptOssStateDictAdapter",
    )


__all__ = [
    "FLAVORS",
    "GptOssAttention",
    "GptOssMoE",
    "GptOssModel",
    "GptOssRoPE",
    "GptOssTransformerBlock",
    "config_from_args",
    "flavor_args",
    "model_registry",
]
