"""qwen3's tensor-parallel plan: llama3's sequence-parallel sharding plus q/k norms and MoE.

Attention and the dense feed-forward are sharded as torchtitan v0.2.2 shards qwen3. The q/k norms
act on each rank's local heads; they are wrapped so their (replicated) weights see the heads as
a tensor sharded on dim 2, which makes their gradients sum over the TP ranks.

MoE layers run *replicated* across the TP ranks: each gathers the whole sequence, routes it and
runs every expert (no expert sharding), then keeps its own sequence slice of the output. Routed
experts are not sharded here because sharding them splits the router's gradient into per-rank
partial sums when scores apply after the experts (qwen3's ``score_before_experts=False``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from titan.distributed.tensor_parallel import tp_styles

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# Dim of a ``[bs, seq, heads, head_dim]`` projection that column-sharded q/k/v split.
HEADS_DIM = 2


def parallelize_qwen3(
    model: nn.Module, *, tp_mesh: DeviceMesh, loss_parallel: bool, float8_enabled: bool
) -> None:
    """Shard qwen3's matmuls over ``tp_mesh`` with sequence parallel between them.

    Activations between blocks are sharded on the sequence (dim 1). With ``loss_parallel`` the
    logits stay sharded on the vocabulary (a DTensor). With tied embeddings both the embedding
    and the output projection shard the vocabulary rows, so ``init_weights`` can tie them again.
    """
    parallelize_module(
        model,
        tp_mesh,
        {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(
                input_layouts=Shard(1),
                output_layouts=Shard(-1) if loss_parallel else Replicate(),
                use_local_output=not loss_parallel,
            ),
        },
    )
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        plan = {
            "attention_norm": SequenceParallel(),
            # The rotary table (the second input) is a plain full tensor: left as it is.
            "attention": styles.prepare_input(
                input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
            ),
            "attention.wq": styles.colwise(),
            "attention.wk": styles.colwise(),
            "attention.wv": styles.colwise(),
            "attention.wo": styles.rowwise(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
        }
        if block.attention.q_norm is not None:
            plan["attention.q_norm"] = SequenceParallel(
                sequence_dim=HEADS_DIM, use_local_output=True
            )
            plan["attention.k_norm"] = SequenceParallel(
                sequence_dim=HEADS_DIM, use_local_output=True
            )
        if block.moe_enabled:
            plan["moe"] = PrepareModuleInputOutput(
                input_layouts=(Shard(1),),
                desired_input_layouts=(Replicate(),),
                use_local_input=True,
                output_layouts=(Replicate(),),
                desired_output_layouts=(Shard(1),),
                use_local_output=True,
            )
        else:
            plan["feed_forward"] = styles.prepare_input(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
            plan["feed_forward.w1"] = styles.colwise()
            plan["feed_forward.w2"] = styles.rowwise(output_layouts=Shard(1))
            plan["feed_forward.w3"] = styles.colwise()
        parallelize_module(block, tp_mesh, plan)


__all__ = ["parallelize_qwen3"]
