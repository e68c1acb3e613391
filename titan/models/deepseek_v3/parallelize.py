"""deepseek_v3's tensor-parallel plan; the generic steps (AC, compile, FSDP/DDP) are in
``titan.distributed.parallelize``.

Embeddings, the output projection and the dense layers' SwiGLU are sharded as torchtitan v0.2.2's
``apply_non_moe_tp`` shards them (``titan.distributed.tensor_parallel``'s shared plans), with
sequence parallel between the blocks. Multi-head latent
attention follows torchtitan too: the head projections (``wq`` or ``wq_b``, ``wkv_b``) are
column-sharded by heads, ``wo`` row-sharded, while the latent projections and their norms
(``wq_a``, ``q_norm``, ``wkv_a``, ``kv_norm``) and the key's rope part, shared by all heads, stay
whole on every rank as replicated DTensors. Inside the attention everything stays a DTensor, so
the gradients of the replicated parts are summed over the ranks' heads by DTensor's autograd;
``MLAttention`` hands SDPA the local heads.

The MoE layers run *replicated* across the TP ranks, or on each rank's sequence slice when expert
parallel takes the TP ranks (``titan.distributed.tensor_parallel``'s ``moe_plan``), which keeps
the MoE exactly the one-process math.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    PrepareModuleInput,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from titan.distributed.tensor_parallel import (
    ReplicatedCompute,
    feed_forward_plan,
    moe_plan,
    parallelize_decoder_ends,
    tp_styles,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.distributed.parallel_dims import MoELayout


def parallelize_deepseek_v3(
    model: nn.Module,
    *,
    tp_mesh: DeviceMesh,
    loss_parallel: bool,
    float8_enabled: bool,
    moe_layout: MoELayout,
) -> None:
    """Shard deepseek_v3's attention and dense matmuls over ``tp_mesh``; run its MoE layers as
    ``moe_layout`` says (``moe_plan``: replicated, or on each rank's sequence slice when expert
    parallel takes the TP ranks, or with expert tensor parallel splitting the experts).

    Activations between blocks are sharded on the sequence (dim 1). With ``loss_parallel`` the
    logits stay sharded on the vocabulary (a DTensor).
    """
    parallelize_decoder_ends(model, tp_mesh=tp_mesh, loss_parallel=loss_parallel)
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        attention = block.attention
        plan: dict[str, ParallelStyle] = {
            "attention_norm": SequenceParallel(),
            # The whole sequence as a replicated DTensor, and the rotary table as one too, so
            # that the rope's products stay DTensor ops.
            "attention": PrepareModuleInput(
                input_layouts=(Shard(1), Replicate()),
                desired_input_layouts=(Replicate(), Replicate()),
            ),
            "attention.wkv_a": ReplicatedCompute(wrap_io=False),
            "attention.kv_norm": ReplicatedCompute(wrap_io=False),
            "attention.wkv_b": styles.colwise(use_local_output=False),
            "attention.wo": styles.rowwise(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
        }
        if attention.q_lora_rank == 0:
            plan["attention.wq"] = styles.colwise(use_local_output=False)
        else:
            plan["attention.wq_a"] = ReplicatedCompute(wrap_io=False)
            plan["attention.q_norm"] = ReplicatedCompute(wrap_io=False)
            plan["attention.wq_b"] = styles.colwise(use_local_output=False)
        if block.moe_enabled:
            plan.update(moe_plan(block.moe, moe_layout=moe_layout))
        else:
            plan.update(feed_forward_plan(styles))
        parallelize_module(block, tp_mesh, plan)


__all__ = ["parallelize_deepseek_v3"]
