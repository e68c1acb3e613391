"""gpt_oss's tensor-parallel plan; the generic steps (AC, compile, FSDP/DDP) are in
``titan.distributed.parallelize``.

torchtitan v0.2.2's plan: attention as llama3's (heads split over the ranks, sequence parallel
between blocks) with the sinks split by head too; the router replicated; every expert's hidden
units split over the ranks (``mlp1`` by its interleaved gate/up rows, ``mlp2`` by its input
columns), each rank returning a partial sum that is reduce-scattered onto the sequence. The
router then sums its scores' gradients over the ranks (they weight partial sums).

When expert parallel takes the TP ranks, the experts are whole on each EP rank instead and the MoE
runs on each rank's sequence slice (``titan.distributed.tensor_parallel.token_split_moe_plan``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import PrepareModuleInputOutput, parallelize_module

from titan.distributed.tensor_parallel import (
    ReplicatedCompute,
    attention_plan,
    parallelize_decoder_ends,
    token_split_moe_plan,
    tp_styles,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.distributed.parallel_dims import MoELayout

# Expert tensor -> how it is split over the TP ranks (torchtitan's GptossTensorParallel).
EXPERT_PLACEMENTS = {
    "mlp1_weight": Shard(1),
    "mlp1_bias": Shard(1),
    "mlp2_weight": Shard(2),
    "mlp2_bias": Replicate(),
}


def parallelize_gpt_oss(
    model: nn.Module,
    *,
    tp_mesh: DeviceMesh,
    loss_parallel: bool,
    float8_enabled: bool,
    moe_layout: MoELayout,
) -> None:
    """Shard attention heads, sinks and expert hidden units over ``tp_mesh``, with sequence
    parallel between them; the router is replicated. With ``moe_layout`` "token_split" (expert
    parallel takes the TP ranks) the experts are left whole to expert parallel and each rank
    routes its own sequence slice; expert tensor parallel ("hidden_split") is refused.

    With ``loss_parallel`` the output logits stay sharded on the vocabulary (a DTensor).
    ``ValueError`` for an MoE this plan cannot split (shared experts, or scores applied before
    the experts, which would sum the routing gradient twice): gpt-oss has neither.
    """
    if moe_layout == "hidden_split":
        raise ValueError(
            "gpt_oss does not run expert tensor parallel yet; hint: set "
            "parallelism.expert_tensor_parallel_degree = 1 (expert parallel then takes the TP ranks)"
        )
    ep_borrows_tp = moe_layout == "token_split"
    if not ep_borrows_tp:
        for block in model.layers.values():
            _check_splittable(block.moe, tp_mesh.size())
    parallelize_decoder_ends(model, tp_mesh=tp_mesh, loss_parallel=loss_parallel)
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        plan = attention_plan(styles)
        if ep_borrows_tp:
            plan.update(token_split_moe_plan(block.moe))
        else:
            # Tokens gathered from the sequence shards, the partial sums reduce-scattered.
            plan["moe"] = PrepareModuleInputOutput(
                input_layouts=(Shard(1),),
                desired_input_layouts=(Replicate(),),
                use_local_input=True,
                output_layouts=(Partial(),),
                desired_output_layouts=(Shard(1),),
            )
            plan["moe.router.gate"] = ReplicatedCompute()
        parallelize_module(block, tp_mesh, plan)
        _distribute(block.attention, {"sinks": Shard(0)}, tp_mesh)
        if not ep_borrows_tp:
            _distribute(block.moe.experts, EXPERT_PLACEMENTS, tp_mesh)
            block.moe.router.partial_score_grads_over = tp_mesh


def _check_splittable(moe: nn.Module, tp: int) -> None:
    """``ValueError`` naming what stops this plan from splitting ``moe`` over ``tp`` ranks."""
    if moe.shared_experts is not None:
        raise ValueError("gpt_oss's TP plan has no split for shared experts; set them to 0")
    if moe.score_before_experts:
        raise ValueError("gpt_oss's TP plan needs score_before_experts = False (gpt-oss's)")
    hidden = moe.experts.mlp2_weight.shape[-1]
    if hidden % tp:
        raise ValueError(
            f"tensor_parallel_degree ({tp}) must divide the experts' hidden size ({hidden})"
        )


def _distribute(module: nn.Module, placements: dict, tp_mesh: DeviceMesh) -> None:
    """Replace each named parameter of ``module`` by a DTensor placed as ``placements`` says."""
    for name, placement in placements.items():
        param = getattr(module, name)
        if param is None:
            continue
        sharded = distribute_tensor(param.data, tp_mesh, [placement])
        module.register_parameter(name, nn.Parameter(sharded, requires_grad=param.requires_grad))


__all__ = ["EXPERT_PLACEMENTS", "parallelize_gpt_oss"]
