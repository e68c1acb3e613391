"""llama3: Llama 3 / 3.1 dense decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.common.registry import flavor_model_spec
from titan.models.llama3 import flavors
from titan.models.llama3.model_config import (
    Llama3Model,
    config_from_args,
    flavor_args,
)
from titan.protocols.model_spec import Capabilities, ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names in torchtitan's order: debugmodel and 8B (each + flex/varlen), 70B, 405B."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of the llama3 ``flavor`` (e.g. ``"8B"``); ``ValueError`` if unknown."""
    return flavor_model_spec(
        "llama3",
        flavor,
        flavors=flavors.FLAVORS,
        # CP and EP are not in titan-train; everything else llama3 runs, tests prove it.
        capabilities=Capabilities(
            pp=True,
            fsdp=True,
            ddp=True,
            tp=True,
            float8=True,
            compile=True,
            activation_checkpoint=True,
            hf_checkpoints=True,
        ),
        build_loss_fn="titan.components.loss:build_cross_entropy_loss",
        parallelize_fn="titan.models.llama3.parallelize:parallelize_llama",
        state_dict_adapter="titan.models.llama3.state_dict_adapter:Llama3StateDictAdapter",
    )


__all__ = ["FLAVORS", "Llama3Model", "config_from_args", "flavor_args", "model_registry"]
