"""deepseek_v3: DeepSeek V2/V3 style MoE decoders, every v0.2.2 flavor with its numbers."""

from __future__ import annotations

from titan.models.common.registry import flavor_model_spec
from titan.models.deepseek_v3 import flavors
from titan.models.deepseek_v3.model_config import (
    DeepSeekV3Model,
    DeepSeekV3TransformerBlock,
    MLAttention,
    YaRNRoPE,
    config_from_args,
    flavor_args,
)
from titan.protocols.model_spec import Capabilities, ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: debugmodel (+ flex), 16B, 236B, 671B."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of deepseek_v3 ``flavor`` (e.g. ``"671B"``); ValueError if unknown."""
    return flavor_model_spec(
        "deepseek_v3",
        flavor,
        flavors=flavors.FLAVORS,
        # Proven by tests/test_deepseek_v3_*.py: one process, FSDP2/HSDP/DDP and TP over 2 ranks
        # (the gradients of one process), float8 linears (emulated), activation checkpointing,
        # Hugging Face import/export; EP (experts split over the FSDP ranks) matches one process
        # on 2 ranks (tests/test_expert_parallel.py); compiled blocks train with eager's losses
        # (tests/test_deepseek_v3_compile.py); EP with TP (over the TP ranks, and expert TP)
        # matches one process (tests/test_expert_parallel_tp.py).
        capabilities=Capabilities(
            pp=True,
            fsdp=True,
            ddp=True,
            tp=True,
            ep=True,
            etp=True,
            float8=True,
            compile=True,
            activation_checkpoint=True,
            hf_checkpoints=True,
        ),
        build_loss_fn="titan.components.loss:build_cross_entropy_loss",
        parallelize_fn="titan.models.deepseek_v3.parallelize:parallelize_deepseek_v3",
        post_optimizer_build_fn="titan.models.common.moe_balance:register_moe_load_balancing",
        state_dict_adapter=(
            "titan.models.deepseek_v3.state_dict_adapter:DeepSeekV3StateDictAdapter"
        ),
    )


__all__ = [
    "FLAVORS",
    "DeepSeekV3Model",
    "DeepSeekV3TransformerBlock",
    "MLAttention",
    "YaRNRoPE",
    "config_from_args",
    "flavor_args",
    "model_registry",
]
