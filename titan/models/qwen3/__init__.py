"""qwen3: Qwen3 dense and mixture-of-experts decoders, every v0.2.2 flavor with its numbers."""

from __future__ import annotations

from titan.models.common.registry import flavor_model_spec
from titan.models.qwen3 import flavors
from titan.models.qwen3.model_config import (
    Qwen3Attention,
    Qwen3Model,
    config_from_args,
    flavor_args,
)
from titan.protocols.model_spec import Capabilities, ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: dense debugmodel to 32B, then the MoE ones."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of qwen3 ``flavor`` (e.g. ``"30B-A3B"``); ``ValueError`` if unknown."""
    return flavor_model_spec(
        "qwen3",
        flavor,
        flavors=flavors.FLAVORS,
        # Proved by tests/test_qwen3_*: the dense and MoE debug models train in one process
        # (activation checkpointing, bitwise resume), TP=2 matches one process and FSDP=2
        # matches DDP=2 (torchrun, gloo), Hugging Face import/export. Under TP the MoE layers
        # run replicated (parallelize.py). EP=2 matches one process and FSDP=2 and resumes
        # bitwise (tests/test_expert_parallel.py); compiled blocks train as the eager expert loop
        # bit for bit; EP with TP (over the TP ranks, and expert TP) matches one process on 2-4
        # ranks and resumes bitwise (tests/test_expert_parallel_tp.py). PP, CP and float8 are
        # not proved.
        capabilities=Capabilities(
            pp=True,
            fsdp=True,
            ddp=True,
            tp=True,
            ep=True,
            etp=True,
            activation_checkpoint=True,
            compile=True,
            hf_checkpoints=True,
        ),
        build_loss_fn="titan.components.loss:build_cross_entropy_loss",
        parallelize_fn="titan.models.qwen3.parallelize:parallelize_qwen3",
        post_optimizer_build_fn="titan.models.common.moe_balance:register_moe_load_balancing",
        state_dict_adapter="titan.models.qwen3.state_dict_adapter:Qwen3StateDictAdapter",
    )


__all__ = [
    "FLAVORS",
    "Qwen3Attention",
    "Qwen3Model",
    "config_from_args",
    "flavor_args",
    "model_registry",
]
