"""The llama4 family's record: its flavors, what titan-train runs for it, and with what."""

from __future__ import annotations

from titan.models.common.model_family import ModelFamily
from titan.models.llama4 import flavors
from titan.models.llama4.model_config import Llama4Model
from titan.protocols.model_spec import Capabilities

FAMILY = ModelFamily(
    name="llama4",
    flavors=flavors.FLAVORS,
    model_config=Llama4Model.Config,
    # Proved by tests/test_llama4_*: one-process training with activation checkpointing;
    # FSDP (also CPU-offloaded, bf16), DDP, TP (MoE layers replicated), FSDP+TP and HSDP
    # match one process on 2-4 gloo ranks; HF import/export. EP (experts split over the
    # FSDP ranks, tests/test_expert_parallel.py) matches one process on 2 gloo ranks;
    # compiled blocks train as the eager expert loop bit for bit; EP with TP (over the TP
    # ranks, and expert TP) matches one process on 4 ranks (tests/test_expert_parallel_tp.py).
    # PP (tests/test_pipeline_families.py) and CP (tests/test_context_parallel_train.py)
    # match one process on 2 gloo ranks. No float8 yet.
    capabilities=Capabilities(
        fsdp=True,
        ddp=True,
        tp=True,
        cp=True,
        pp=True,
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
"""The llama4 family, as every other part of titan reads it."""
