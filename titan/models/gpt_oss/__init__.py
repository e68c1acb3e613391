"""gpt_oss: gpt-oss MoE decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.common.registry import flavor_model_spec
from titan.models.gpt_oss import flavors
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

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: debugmodel, 20b, 120b."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of gpt_oss ``flavor`` (e.g. ``"20b"``); ``ValueError`` if unknown."""
    return flavor_model_spec(
        "gpt_oss",
        flavor,
        flavors=flavors.FLAVORS,
        # Proved by tests/test_gpt_oss_*: one-process training (both config forms, bitwise),
        # activation checkpointing, Hugging Face import/export; FSDP/HSDP (also CPU-offloaded
        # and bf16), TP (heads, sinks and expert hidden units split; also under FSDP) and DDP
        # against one process on two ranks; per-block compile (aot_eager) trains like eager;
        # EP 2 (whole experts per rank) against one process on two ranks
        # (tests/test_expert_parallel.py). float8 is not tested for gpt_oss.
        capabilities=Capabilities(
            pp=True,
            fsdp=True,
            ddp=True,
            tp=True,
            ep=True,
            compile=True,
            activation_checkpoint=True,
            hf_checkpoints=True,
        ),
        build_loss_fn="titan.components.loss:build_cross_entropy_loss",
        parallelize_fn="titan.models.gpt_oss.parallelize:parallelize_gpt_oss",
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
