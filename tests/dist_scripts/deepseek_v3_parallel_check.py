"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU): parallelized deepseek_v3 vs one process.

``parallel_check.py``'s scenarios (loss, gradients and the clipped gradient norm of the sharded
model against the unsharded one, same tolerances) on a tiny deepseek_v3 instead of llama3: a dense
layer, then two MoE layers (8 experts in 4 groups, top-2 of 2 groups, sigmoid with route_norm and
route_scale, one shared expert), MLA with a q LoRA, YaRN on (16 positions past 8).
"""

from __future__ import annotations

import os

from tests.dist_scripts import parallel_check
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.deepseek_v3 import model_registry
from titan.models.deepseek_v3.model_config import (
    DeepSeekV3Model,
    DeepSeekV3TransformerBlock,
    MLAttention,
    YaRNRoPE,
)


def model_config() -> DeepSeekV3Model.Config:
    """The tiny deepseek_v3 every scenario shards."""
    return DeepSeekV3Model.Config(
        dim=64,
        n_layers=3,
        vocab_size=parallel_check.VOCAB,
        max_seq_len=parallel_check.SEQ,
        rope=YaRNRoPE.Config(original_seq_len=8, rope_factor=4.0, mscale=0.7),
        layer=DeepSeekV3TransformerBlock.Config(
            attention=MLAttention.Config(
                n_heads=4,
                q_lora_rank=24,
                kv_lora_rank=16,
                qk_nope_head_dim=16,
                qk_rope_head_dim=8,
                v_head_dim=16,
            ),
            feed_forward=FeedForward.Config(hidden_dim=96),
            moe=MoE.Config(
                hidden_dim=32,
                num_experts=8,
                num_shared_experts=1,
                top_k=2,
                score_func="sigmoid",
                route_norm=True,
                route_scale=2.5,
                score_before_experts=False,
                num_expert_groups=4,
                num_limited_groups=2,
            ),
            n_dense_layers=1,
        ),
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The llama3 script reads its model and spec through these two names at call time.
    parallel_check.model_config = model_config
    parallel_check.model_registry = model_registry
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    run_and_leave(parallel_check.main)
