"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU): parallelized llama4 vs one process.

``parallel_check.py``'s scenarios (loss, gradients and the clipped gradient norm of the sharded
model against the unsharded one, same tolerances) on a tiny llama4 instead of llama3: a dense
layer, then an MoE layer (4 experts, top-1 sigmoid, one shared expert, load-balancing bias),
NoPE on layer 0, flex-style chunks of 8 on layer 1 over a sequence of 16.
"""

from __future__ import annotations

import os

from tests.dist_scripts import parallel_check
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.llama4 import model_registry
from titan.models.llama4.model_config import Llama4Attention, Llama4Model, Llama4TransformerBlock


def model_config() -> Llama4Model.Config:
    """The tiny llama4 every scenario shards."""
    return Llama4Model.Config(
        dim=64,
        n_layers=2,
        vocab_size=parallel_check.VOCAB,
        max_seq_len=parallel_check.SEQ,
        layer=Llama4TransformerBlock.Config(
            attention=Llama4Attention.Config(
                n_heads=4,
                n_kv_heads=2,
                attn_type="flex",
                every_n_layers_nope=2,
                fixed_attn_block_size=8,
            ),
            feed_forward=FeedForward.Config(multiple_of=32),
            moe=MoE.Config(num_experts=4),
            interleave_moe_layer_step=2,
        ),
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The llama3 script reads its model and spec through these two names at call time.
    parallel_check.model_config = model_config
    parallel_check.model_registry = model_registry
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    run_and_leave(parallel_check.main)
