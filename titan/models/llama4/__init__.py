"""llama4: Llama 4 MoE decoders, every v0.2.2 flavor with its hyperparameters.

The ``*_irope`` flavors were removed from torchtitan after v0.2.2; titan keeps them so that a
legacy config naming one still migrates without loss.
"""

from __future__ import annotations

from titan.models.common.registry import flavor_model_spec
from titan.models.llama4 import flavors
from titan.models.llama4.model_config import (
    Llama4Attention,
    Llama4Model,
    Llama4TransformerBlock,
    config_from_args,
    flavor_args,
)
from titan.protocols.model_spec import Capabilities, ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names in torchtitan's order: debugmodel, 17bx16e, 17bx128e, then their _irope twins."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of llama4 ``flavor`` (e.g. ``"17bx16e"``); ValueError if unknown."""
    return flavor_model_spec(
        "llama4",
        flavor,
        flavors=flavors.FLAVORS,
        # Proved by tests/test_llama4_*: one-process training with activation checkpointing;
        # FSDP (also CPU-offloaded, bf16), DDP, TP (MoE layers replicated), FSDP+TP and HSDP
        # match one process on 2-4 gloo ranks; HF import/export. EP (experts split over the
        # FSDP ranks, tests/test_expert_parallel.py) matches one process on 2 gloo ranks;
        # compiled blocks train as the eager expert loop bit for bit; EP with TP (over the TP
        # ranks, and expert TP) matches one process on 4 ranks (tests/test_expert_parallel_tp.py).
        # No float8, PP or CP yet.
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
        parallelize_fn="titan.models.llama4.parallelize:parallelize_llama4",
        post_optimizer_build_fn="titan.models.common.moe_balance:register_moe_load_balancing",
        state_dict_adapter="titan.models.llama4.state_dict_adapter:Llama4StateDictAdapter",
    )


__all__ = [
    "FLAVORS",
    "Llama4Attention",
    "Llama4Model",
    "Llama4TransformerBlock",
    "config_from_args",
    "flavor_args",
    "model_registry",
]
