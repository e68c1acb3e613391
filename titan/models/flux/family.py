"""The flux family's record: its flavors, what titan-train runs for it, and with what."""

from __future__ import annotations

from titan.models.common.model_family import ModelFamily
from titan.models.flux import flavors
from titan.models.flux.model_config import FluxModel
from titan.protocols.model_spec import Capabilities

FAMILY = ModelFamily(
    name="flux",
    flavors=flavors.FLAVORS,
    model_config=FluxModel.Config,
    trainer="titan.models.flux.trainer:FluxTrainer.Config",
    # FSDP/HSDP and activation checkpointing per block (titan.models.flux.parallelize); flux
    # has no tensor, pipeline, expert or context parallel plan.
    # The loaders build their own T5 and CLIP tokenizers, reading hf_assets_path in test mode.
    capabilities=Capabilities(
        fsdp=True, activation_checkpoint=True, hf_checkpoints=True, loaders_read_assets=True
    ),
    build_loss_fn="titan.models.flux.loss:build_mse_loss",
    state_dict_adapter="titan.models.flux.state_dict_adapter:FluxStateDictAdapter",
)
"""The flux family, as every other part of titan reads it."""
