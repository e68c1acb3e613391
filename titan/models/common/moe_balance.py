"""Auxiliary-loss-free load balancing of the MoE layers (https://arxiv.org/abs/2408.15664).

Each MoE layer counts, in its ``tokens_per_expert`` buffer, the tokens every expert received
during the forward passes since the last optimizer step. Once per optimizer step this module sums
the counts over the ranks that routed different tokens (the data-parallel ones, and the TP ones
too when expert parallel takes them) and moves each layer's ``expert_bias`` by
``load_balance_coeff`` toward the experts that got fewer tokens than average (torchtitan v0.2.2's
rule: ``delta = coeff * sign(mean - counts)``, centred to mean zero), then zeroes the counts.

The update runs from the optimizers' step hook. torchtitan registers it as a pre-hook; titan's
containers offer a post-step hook, which is equivalent: the bias is a buffer the optimizer never
reads, and it only enters the next forward pass either way.

Activation checkpointing recomputes a block's forward, so in eager mode the counts of a
recomputed layer are exactly doubled (a compiled block counts once); the update depends only on
the signs of ``mean - counts``, which doubling keeps.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from titan.distributed.parallel_dims import ParallelDims

# Ranks that see different tokens and so must pool their counts: the data-parallel ones
# (tensor-parallel ranks route the same, replicated tokens), and the tensor-parallel ones too when
# expert parallel takes them (each routes its own sequence slice).
BALANCE_MESH = "dp_cp"
BALANCE_MESH_EP_BORROWS_TP = "dp_tp"


def balanced_moe_layers(model_parts: list[nn.Module]) -> list[nn.Module]:
    """The MoE modules of every block that runs one with load balancing, in model order."""
    layers = []
    for part in model_parts:
        blocks = part.get_submodule("layers")
        for block in blocks.values():
            moe = getattr(block, "moe", None)
            if moe is not None and moe.load_balance_coeff is not None:
                layers.append(moe)
    return layers


def expert_bias_delta(tokens_per_expert: torch.Tensor, coeff: float) -> torch.Tensor:
    """The bias change of one layer: ``coeff`` toward under-used experts, centred to mean 0."""
    counts = tokens_per_expert.float()
    delta = coeff * torch.sign(counts.mean() - counts)
    return delta - delta.mean()


def balance_mesh(parallel_dims: ParallelDims, world_mesh: Any) -> Any:
    """The mesh of the ranks whose token counts pool (:data:`BALANCE_MESH`, or
    :data:`BALANCE_MESH_EP_BORROWS_TP` when expert parallel takes the TP ranks); None when one
    rank sees every token."""
    name = BALANCE_MESH_EP_BORROWS_TP if parallel_dims.ep_borrows_tp else BALANCE_MESH
    return parallel_dims.mesh(world_mesh, name)


def update_expert_bias(layers: list[nn.Module], *, dp_mesh: Any) -> None:
    """Pool the layers' token counts over ``dp_mesh`` (if any: :func:`balance_mesh`), update the
    biases, zero the counts."""
    counts = torch.vstack([layer.tokens_per_expert for layer in layers])
    if dp_mesh is not None:
        # One all-reduce for all layers: the counts are small and the sync is on the step path.
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=dp_mesh.get_group())
    with torch.no_grad():
        for layer, layer_counts in zip(layers, counts, strict=True):
            layer.expert_bias.add_(expert_bias_delta(layer_counts, layer.load_balance_coeff))
            layer.tokens_per_expert.zero_()


def register_moe_load_balancing(
    optimizers: Any,
    *,
    model_parts: list[nn.Module],
    parallel_dims: ParallelDims,
    world_mesh: Any,
) -> None:
    """Update the MoE expert biases once per optimizer step; nothing without balanced layers."""
    layers = balanced_moe_layers(model_parts)
    if not layers:
        return
    dp_mesh = balance_mesh(parallel_dims, world_mesh)
    optimizers.register_step_post_hook(lambda *_: update_expert_bias(layers, dp_mesh=dp_mesh))


__all__ = [
    "BALANCE_MESH",
    "BALANCE_MESH_EP_BORROWS_TP",
    "balance_mesh",
    "balanced_moe_layers",
    "expert_bias_delta",
    "register_moe_load_balancing",
    "update_expert_bias",
]
