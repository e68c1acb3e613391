"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU): parallelized gpt_oss vs one process.

``parallel_check.py``'s scenarios (loss, gradients and the clipped gradient norm of the sharded
model against the unsharded one, same tolerances) on a tiny gpt_oss instead of llama3: two MoE
layers (4 biased clamped-SwiGLU experts, softmax top-2, load-balancing bias), attention with
sinks and biases, a window of 8 on layer 0 over a sequence of 16, YaRN rope.
"""

from __future__ import annotations

import os

from tests.dist_scripts import parallel_check
from titan.models.gpt_oss import model_registry
from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssRoPE,
    GptOssTransformerBlock,
)


def model_config() -> GptOssModel.Config:
    """The tiny gpt_oss every scenario shards."""
    return GptOssModel.Config(
        dim=64,
        n_layers=2,
        vocab_size=parallel_check.VOCAB,
        max_seq_len=parallel_check.SEQ,
        rope=GptOssRoPE.Config(theta=150000.0, rope_factor=32.0),
        layer=GptOssTransformerBlock.Config(
            attention=GptOssAttention.Config(
                n_heads=4, n_kv_heads=2, head_dim=16, sliding_window_size=8
            ),
            feed_forward=None,
            moe=GptOssMoE.Config(
                hidden_dim=32,
                num_experts=4,
                top_k=2,
                num_shared_experts=0,
                score_func="softmax",
                route_norm=True,
                gate_bias=True,
                score_before_experts=False,
            ),
        ),
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The llama3 script reads its model and spec through these two names at call time.
    parallel_check.model_config = model_config
    parallel_check.model_registry = model_registry
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    run_and_leave(parallel_check.main)
