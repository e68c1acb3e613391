"""qwen3's tensor-parallel plan: llama3's sequence-parallel sharding plus q/k norms and MoE.

Attention and the dense feed-forward are sharded as torchtitan v0.2.2 shards qwen3. The q/k norms
act on each rank's local heads; they are wrapped so their (replicated) weights see the heads as
a tensor sharded on dim 2, which makes their gradients sum over the TP ranks.

MoE layers take ``titan.distributed.tensor_parallel``'s ``moe_plan``: replicated across the TP
ranks (every rank runs every expert on the whole sequence), or, when expert parallel takes the TP
ranks, each rank's sequence slice routed to the experts over the EP group, or replicated with the
experts' hidden units split by expert tensor parallel, whose partial outputs are summed before
the scores weight them (so the router's gradient stays whole with qwen3's
``score_before_experts=False``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

from titan.distributed.tensor_parallel import (
    attention_plan,
    feed_forward_plan,
    moe_plan,
    parallelize_decoder_ends,
    tp_styles,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.distributed.parallel_dims import MoELayout

# Dim of a ``[bs, seq, heads, head_dim]`` projection that column-sharded q/k/v split.
HEADS_DIM = 2


def parallelize_qwen3(
    model: nn.Module,
    *,
    tp_mesh: DeviceMesh,
    loss_parallel: bool,
    float8_enabled: bool,
    moe_layout: MoELayout,
) -> None:
    """Shard qwen3's matmuls over ``tp_mesh`` with sequence parallel between them.

    Activations between blocks are sharded on the sequence (dim 1). With ``loss_parallel`` the
    logits stay sharded on the vocabulary (a DTensor). With tied embeddings both the embedding
    and the output projection shard the vocabulary rows, so ``init_buffers`` can tie them again.
    The MoE layers run as ``moe_layout`` says (``moe_plan``).
    """
    parallelize_decoder_ends(model, tp_mesh=tp_mesh, loss_parallel=loss_parallel)
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        plan = attention_plan(styles)
        if block.attention.q_norm is not None:
            for norm in ("attention.q_norm", "attention.k_norm"):
                plan[norm] = SequenceParallel(sequence_dim=HEADS_DIM, use_local_output=True)
        if block.moe_enabled:
            plan.update(moe_plan(block.moe, moe_layout=moe_layout))
        else:
            plan.update(feed_forward_plan(styles))
        parallelize_module(block, tp_mesh, plan)


__all__ = ["parallelize_qwen3"]
