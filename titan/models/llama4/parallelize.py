"""llama4's tensor-parallel plan; the generic steps (AC, compile, FSDP/DDP) are in
``titan.distributed.parallelize``.

Embeddings, attention and the dense layers' SwiGLU are sharded as torchtitan v0.2.2's
``apply_non_moe_tp`` shards them (``titan.distributed.tensor_parallel``'s shared plans), with
sequence parallel between the blocks. Each attention gathers the whole sequence before it runs, so
the chunked and global masks see every position. The MoE layers run replicated across the TP
ranks, or on each rank's sequence slice when expert parallel takes the TP ranks
(``moe_plan``): exactly the one-process math either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor.parallel import parallelize_module

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


def parallelize_llama4(
    model: nn.Module,
    *,
    tp_mesh: DeviceMesh,
    loss_parallel: bool,
    float8_enabled: bool,
    moe_layout: MoELayout,
) -> None:
    """Shard llama4's attention and dense matmuls over ``tp_mesh``; run its MoE layers as
    ``moe_layout`` says (``moe_plan``: replicated, or on each rank's sequence slice when expert
    parallel takes the TP ranks, or with expert tensor parallel splitting the experts).

    Activations between blocks are sharded on the sequence (dim 1). With ``loss_parallel`` the
    output logits stay sharded on the vocabulary (a DTensor). ``float8_enabled``: the linears are
    torchao float8 linears (tensorwise recipe), sharded with torchao's styles.
    """
    parallelize_decoder_ends(model, tp_mesh=tp_mesh, loss_parallel=loss_parallel)
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        plan = attention_plan(styles)
        if block.moe_enabled:
            plan.update(moe_plan(block.moe, moe_layout=moe_layout))
        else:
            plan.update(feed_forward_plan(styles))
        parallelize_module(block, tp_mesh, plan)


__all__ = ["parallelize_llama4"]
