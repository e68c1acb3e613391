"""The deepseek_v3 family's record: its flavors, what titan-train runs for it, and with what."""

from __future__ import annotations

from titan.models.common.model_family import ModelFamily
from titan.models.deepseek_v3 import flavors
from titan.models.deepseek_v3.model_config import DeepSeekV3Model
from titan.protocols.model_spec import Capabilities

FAMILY = ModelFamily(
    name="deepseek_v3",
    flavors=flavors.FLAVORS,
    model_config=DeepSeekV3Model.Config,
    # Proven by tests/test_deepseek_v3_*.py: one process, FSDP2/HSDP/DDP and TP over 2 ranks
    # (the gradients of one process), float8 linears (emulated), activation checkpointing,
    # Hugging Face import/export; EP (experts split over the FSDP ranks) matches one process
    # on 2 ranks (tests/test_expert_parallel.py); compiled blocks train with eager's losses
    # (tests/test_deepseek_v3_compile.py); EP with TP (over the TP ranks, and expert TP)
    # matches one process (tests/test_expert_parallel_tp.py).
    capabilities=Capabilities(
        fsdp=True,
        ddp=True,
        tp=True,
        cp=True,
        pp=True,
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
    state_dict_adapter=("titan.models.deepseek_v3.state_dict_adapter:DeepSeekV3StateDictAdapter"),
)
"""The deepseek_v3 family, as every other part of titan reads it."""
