"""qwen3's tensor-parallel plan: llama3's sequence-parallel sharding plus q/k norms and MoE.

Attention and the dense feed-forward are sharded as torchtitan v0.2.2 shards qwen3. The q/k norms
act on each rank's local heads; they are wrapped so their (replicated) weights see the heads as
a tensor sharded on dim 2, which makes their gradients sum over the TP ranks.

MoE layers run *replicated* across the TP ranks: each gathers the whole sequence, routes it and
runs every expert (no expert sharding), then keeps its own sequence slice of the output; their
parameters become replicated DTensors so that one optimizer steps them with the rest. Routed
experts are not sharded here because sharding them splits the router's gradient into per-rank
partial sums when scores apply after the experts (qwen3's ``score_before_experts=False``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ParallelStyle,
    PrepareModuleInputOutput,
    SequenceParallel,
    parallelize_module,
)

from titan.distributed.tensor_parallel import (
    attention_plan,
    feed_forward_plan,
    parallelize_decoder_ends,
    tp_styles,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# Dim of a ``[bs, seq, heads, head_dim]`` projection that column-sharded q/k/v split.
HEADS_DIM = 2


class ReplicatedCompute(ParallelStyle):
    """Every TP rank runs the whole module on the same full input, with its parameters as
    replicated DTensors (so one optimizer steps them with the sharded ones).

    Inputs arrive as plain tensors and leave as plain tensors. Each rank computes the complete
    gradients, so they are replicated as they are: no collective runs. ``wrap_io=False`` is for
    modules that compute on their parameters' local tensors themselves (the grouped experts).
    """

    def __init__(self, *, wrap_io: bool = True):
        super().__init__()
        self.wrap_io = wrap_io

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        """Replicate the parameters over ``device_mesh``; wrap inputs and outputs if asked."""
        if not self.wrap_io:
            return distribute_module(module, device_mesh)
        return distribute_module(
            module, device_mesh, input_fn=_replicated_input, output_fn=_local_output
        )


def _replicated_input(module: nn.Module, inputs: Any, device_mesh: DeviceMesh) -> Any:
    """The module's first input as a replicated DTensor (it is the same full tensor everywhere)."""
    first, *rest = inputs
    if not isinstance(first, DTensor):
        first = DTensor.from_local(first, device_mesh, (Replicate(),), run_check=False)
    return (first, *rest)


def _local_output(module: nn.Module, output: Any, device_mesh: DeviceMesh) -> Any:
    """The module's replicated DTensor output as the plain full tensor."""
    return output.to_local() if isinstance(output, DTensor) else output


def parallelize_qwen3(
    model: nn.Module, *, tp_mesh: DeviceMesh, loss_parallel: bool, float8_enabled: bool
) -> None:
    """Shard qwen3's matmuls over ``tp_mesh`` with sequence parallel between them.

    Activations between blocks are sharded on the sequence (dim 1). With ``loss_parallel`` the
    logits stay sharded on the vocabulary (a DTensor). With tied embeddings both the embedding
    and the output projection shard the vocabulary rows, so ``init_buffers`` can tie them again.
    """
    parallelize_decoder_ends(model, tp_mesh=tp_mesh, loss_parallel=loss_parallel)
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        plan = attention_plan(styles)
        if block.attention.q_norm is not None:
            for norm in ("attention.q_norm", "attention.k_norm"):
                plan[norm] = SequenceParallel(sequence_dim=HEADS_DIM, use_local_output=True)
        if block.moe_enabled:
            plan.update(
                replicated_moe_plan(has_shared_experts=block.moe.shared_experts is not None)
            )
        else:
            plan.update(feed_forward_plan(styles))
        parallelize_module(block, tp_mesh, plan)


def replicated_moe_plan(*, has_shared_experts: bool) -> dict[str, ParallelStyle]:
    """The plan of a block's MoE run whole on every TP rank: input gathered from the sequence
    shards, output cut back to this rank's sequence slice, parameters replicated."""
    plan: dict[str, ParallelStyle] = {
        "moe": PrepareModuleInputOutput(
            input_layouts=(Shard(1),),
            desired_input_layouts=(Replicate(),),
            use_local_input=True,
            output_layouts=(Replicate(),),
            desired_output_layouts=(Shard(1),),
            use_local_output=True,
        ),
        "moe.router.gate": ReplicatedCompute(),
        "moe.experts": ReplicatedCompute(wrap_io=False),
    }
    if has_shared_experts:
        for name in ("w1", "w2", "w3"):
            plan[f"moe.shared_experts.{name}"] = ReplicatedCompute()
    return plan


__all__ = ["ReplicatedCompute", "parallelize_qwen3", "replicated_moe_plan"]
