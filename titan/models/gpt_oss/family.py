"""The gpt_oss family's record: its flavors, what titan-train runs for it, and with what."""

from __future__ import annotations

from titan.models.common.model_family import ModelFamily
from titan.models.gpt_oss import flavors
from titan.models.gpt_oss.model_config import GptOssModel
from titan.protocols.model_spec import Capabilities

FAMILY = ModelFamily(
    name="gpt_oss",
    flavors=flavors.FLAVORS,
    model_config=GptOssModel.Config,
    # Proved by tests/test_gpt_oss_*: one-process training (both config forms, bitwise),
    # activation checkpointing, Hugging Face import/export; FSDP/HSDP (also CPU-offloaded
    # and bf16), TP (heads, sinks and expert hidden units split; also under FSDP) and DDP
    # against one process on two ranks; per-block compile (aot_eager) trains like eager;
    # EP 2 (whole experts per rank) against one process on two ranks
    # (tests/test_expert_parallel.py). float8 is not tested for gpt_oss.
    capabilities=Capabilities(
        fsdp=True,
        ddp=True,
        tp=True,
        cp=True,
        pp=True,
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
"""The gpt_oss family, as every other part of titan reads it."""
