"""llama3: Llama 3 / 3.1 dense decoders, every v0.2.2 flavor with its hyperparameters."""

from __future__ import annotations

from titan.models.common.registry import family_flavors, flavor_model_spec
from titan.models.llama3.model_config import (
    TRAINING_STATUS,
    Llama3Model,
    config_from_args,
    flavor_args,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = family_flavors("llama3")
"""Flavor names in torchtitan's order: debugmodel and 8B (each + flex/varlen), 70B, 405B."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of the llama3 ``flavor`` (e.g. ``"8B"``); ``ValueError`` if unknown."""
    return flavor_model_spec(
        "llama3",
        flavor,
        config_from_args=config_from_args,
        training_status=TRAINING_STATUS,
        build_loss_fn="titan.components.loss:build_cross_entropy_loss",
        parallelize_fn="titan.models.llama3.parallelize:parallelize_llama",
        state_dict_adapter="titan.models.llama3.state_dict_adapter:Llama3StateDictAdapter",
    )


__all__ = ["FLAVORS", "Llama3Model", "config_from_args", "flavor_args", "model_registry"]
