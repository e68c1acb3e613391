"""The qwen3 family's record: its flavors, what titan-train runs for it, and with what."""

from __future__ import annotations

from titan.models.common.model_family import ModelFamily
from titan.models.qwen3 import flavors
from titan.models.qwen3.model_config import Qwen3Model
from titan.protocols.model_spec import Capabilities

FAMILY = ModelFamily(
    name="qwen3",
    flavors=flavors.FLAVORS,
    model_config=Qwen3Model.Config,
    # Proved by tests/test_qwen3_*: the dense and MoE debug models train in one process
    # (activation checkpointing, bitwise resume), TP=2 matches one process and FSDP=2
    # matches DDP=2 (torchrun, gloo), Hugging Face import/export. Under TP the MoE layers
    # run replicated (parallelize.py). EP=2 matches one process and FSDP=2 and resumes
    # bitwise (tests/test_expert_parallel.py); compiled blocks train as the eager expert loop
    # bit for bit; EP with TP (over the TP ranks, and expert TP) matches one process on 2-4
    # ranks and resumes bitwise (tests/test_expert_parallel_tp.py). PP and CP match one process
    # (tests/test_pipeline_families.py, tests/test_context_parallel_train.py), and so do EP
    # with CP (the experts over the CP and shard ranks) and PP with CP; float8 is not proved.
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
    parallelize_fn="titan.models.qwen3.parallelize:parallelize_qwen3",
    # No load-balancing hook, as torchtitan v0.2.2's qwen3 builds plain optimizers (not
    # build_optimizers_with_moe_load_balancing as its deepseek_v3, llama4 and gpt_oss do): the MoE
    # flavors keep load_balance_coeff 1e-3, so each MoE layer holds its persistent expert_bias
    # (in checkpoints, zero on HF import), but nothing updates it. It stays zero, and routing is
    # the unbiased one (scores + 0 is scores bit for bit). torchtitan added the hook after v0.2.2.
    state_dict_adapter="titan.models.qwen3.state_dict_adapter:Qwen3StateDictAdapter",
)
"""The qwen3 family, as every other part of titan reads it."""
