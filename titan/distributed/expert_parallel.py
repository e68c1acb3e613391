"""Expert parallel: each rank of an EP group holds ``num_experts / ep`` of every MoE layer's routed
experts and runs them on the tokens that every rank of the group routed there.

What happens around ``moe.experts(routed, num_tokens_per_expert)`` on one rank (ep = 2, 4
experts, so experts 0-1 live on EP rank 0 and 2-3 on EP rank 1)::

    routed rows, sorted by global expert   [e0 e0 e1 | e2 e3 e3]   counts [2 1 1 2]
        all-to-all of the counts          -> what every rank sends to my experts
        all-to-all of the rows            -> [from rank 0: e0.. e1.. | from rank 1: e0.. e1..]
        stable sort by local expert       -> [e0 (rank 0, rank 1) | e1 (rank 0, rank 1)]
    local experts (GroupedExperts on its Shard(0) slice of w1/w2/w3)
        inverse sort, all-to-all back     -> the rows in the order this rank sent them

The experts' parameters are DTensors sharded on dim 0 (the expert dimension) over the EP mesh;
FSDP then shards each experts module over the ranks EP does not take (``efsdp``, see
``ParallelDims``), while the rest of the block is sharded over the whole data-parallel mesh.
Counts are exchanged as tensors but the row splits go to the host: the all-to-all needs them
(torchtitan's ``ExpertParallel`` does the same). gloo (CPU) and NCCL both run uneven splits.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed._functional_collectives import (
    all_to_all_single,
    all_to_all_single_autograd,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import (
    DTensor,
    Partial,
    Replicate,
    Shard,
    distribute_module,
    distribute_tensor,
)
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

from titan.schemas.expert_rules import experts_per_rank_problem

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclasses.dataclass(slots=True)
class _Exchange:
    """What one forward's token dispatch leaves for its combine."""

    input_splits: list[int]
    """Rows this rank sent to each EP rank."""
    output_splits: list[int]
    """Rows this rank received from each EP rank."""
    order: torch.Tensor
    """The permutation that sorted the received rows by local expert."""


class ExpertParallel(ParallelStyle):
    """Shard a routed-experts module on its expert dimension over an EP mesh and exchange the
    tokens of its forward with all-to-alls. One instance per experts module (it keeps the
    exchange of the forward in flight between dispatch and combine)."""

    def __init__(self) -> None:
        super().__init__()
        self._exchange: _Exchange | None = None

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        """Shard ``module``'s parameters and wrap its forward with dispatch and combine."""
        return distribute_module(
            module,
            device_mesh,
            partition_fn=shard_expert_dim,
            input_fn=self.dispatch,
            output_fn=self.combine,
        )

    def dispatch(
        self, module: nn.Module, inputs: tuple[Any, ...], device_mesh: DeviceMesh
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Send each routed row to the EP rank holding its expert; return the rows this rank's
        experts run, grouped by local expert, and the count per local expert."""
        routed, num_tokens_per_expert = inputs
        ep = device_mesh.size()
        group = device_mesh.get_group()
        counts = num_tokens_per_expert.to(torch.int64)
        local_experts = counts.shape[0] // ep
        with torch.no_grad():
            received = all_to_all_single(counts, None, None, group=group)
            received = torch.ops._c10d_functional.wait_tensor(received).view(ep, local_experts)
            input_splits = counts.view(ep, local_experts).sum(dim=1).tolist()
            output_splits = received.sum(dim=1).tolist()
        rows = all_to_all_single_autograd(routed, output_splits, input_splits, group)
        # Received rows come rank by rank, each rank's rows by local expert; a stable sort by
        # local expert keeps, inside one expert, the source ranks in order and each rank's order.
        chunk_of_row = torch.repeat_interleave(
            torch.arange(ep * local_experts, device=rows.device),
            received.flatten().to(rows.device),
            output_size=rows.shape[0],
        )
        order = torch.argsort(chunk_of_row % local_experts, stable=True)
        self._exchange = _Exchange(
            input_splits=input_splits, output_splits=output_splits, order=order
        )
        return rows[order], received.sum(dim=0)

    def combine(
        self, module: nn.Module, routed_output: torch.Tensor, device_mesh: DeviceMesh
    ) -> torch.Tensor:
        """Return every row's expert output to the rank that routed it, in its original order."""
        exchange = self._exchange
        assert exchange is not None, "combine without a dispatch"
        self._exchange = None
        unsorted = torch.zeros_like(routed_output).index_copy(0, exchange.order, routed_output)
        return all_to_all_single_autograd(
            unsorted, exchange.input_splits, exchange.output_splits, device_mesh.get_group()
        )


class ExpertTensorParallel(ExpertParallel):
    """Expert parallel over the first dimension of a 2-D ``(ep, tp)`` mesh, with each expert's
    hidden units split over the second (``expert_tensor_parallel_degree = tp``).

    The TP ranks of an EP rank route the same tokens (the MoE layer runs replicated over TP), so
    each exchanges the same rows with its EP peers of the same TP index. Its experts then compute
    partial outputs from their hidden shards, which are summed over TP before they travel back,
    and the gradient of the rows is summed over TP in backward (Megatron's pair of collectives
    around a split MLP). Everything after the experts is the one-process math, so the router's
    gradient is whole on every rank whether the scores apply before or after the experts.

    ``hidden_dims`` names each parameter's hidden dimension (``GroupedExperts``: w1 and w3 on 1,
    w2 on 2).
    """

    def __init__(self, hidden_dims: dict[str, int]) -> None:
        super().__init__()
        self.hidden_dims = hidden_dims

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        """Shard ``module``'s parameters on (experts, hidden) and wrap its forward."""
        return distribute_module(
            module,
            device_mesh,
            partition_fn=self.shard_experts_and_hidden,
            input_fn=self.dispatch_rows,
            output_fn=self.combine_rows,
        )

    def shard_experts_and_hidden(
        self, name: str, module: nn.Module, device_mesh: DeviceMesh
    ) -> None:
        """Make every parameter ``module`` holds a DTensor ``[Shard(0), Shard(hidden)]``."""
        for param_name, param in list(module.named_parameters(recurse=False)):
            placements = [Shard(0), Shard(self.hidden_dims[param_name])]
            sharded = nn.Parameter(distribute_tensor(param, device_mesh, placements))
            module.register_parameter(param_name, sharded)

    def dispatch_rows(
        self, module: nn.Module, inputs: tuple[Any, ...], device_mesh: DeviceMesh
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`ExpertParallel.dispatch` over the EP dimension; the rows' gradient summed
        over the TP dimension."""
        ep_mesh, tp_mesh = _ep_and_tp(device_mesh)
        rows, counts = self.dispatch(module, inputs, ep_mesh)
        return with_grad_summed_over(rows, tp_mesh), counts

    def combine_rows(
        self, module: nn.Module, routed_output: torch.Tensor, device_mesh: DeviceMesh
    ) -> torch.Tensor:
        """Sum the partial outputs over the TP dimension, then :meth:`ExpertParallel.combine`
        over the EP dimension."""
        ep_mesh, tp_mesh = _ep_and_tp(device_mesh)
        return self.combine(module, summed_over(routed_output, tp_mesh), ep_mesh)


def _ep_and_tp(device_mesh: DeviceMesh) -> tuple[DeviceMesh, DeviceMesh]:
    """The two 1-D meshes of a 2-D ``(ep, tp)`` mesh."""
    ep_name, tp_name = device_mesh.mesh_dim_names
    return device_mesh[ep_name], device_mesh[tp_name]


def with_grad_summed_over(x: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
    """``x`` itself forward; backward, its gradient summed over ``mesh`` (each rank computes a
    partial one from its shard of the weights)."""
    replicated = DTensor.from_local(x, mesh, (Replicate(),), run_check=False)
    return replicated.to_local(grad_placements=(Partial(),))


def summed_over(x: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
    """The sum of every rank's ``x`` over ``mesh`` (an all-reduce); backward, the gradient as it
    is (every rank's partial ``x`` contributed to the whole sum)."""
    partial = DTensor.from_local(x, mesh, (Partial(),), run_check=False)
    return partial.redistribute(placements=(Replicate(),)).to_local()


def shard_expert_dim(name: str, module: nn.Module, device_mesh: DeviceMesh) -> None:
    """Make every parameter that ``module`` itself holds a DTensor sharded on dim 0 (experts)."""
    for param_name, param in list(module.named_parameters(recurse=False)):
        sharded = nn.Parameter(distribute_tensor(param, device_mesh, [Shard(0)]))
        module.register_parameter(param_name, sharded)


def moe_layers(model: nn.Module) -> list[nn.Module]:
    """The MoE module of every block that has one (``block.moe``), in model order."""
    return [block.moe for block in model.layers.values() if getattr(block, "moe_enabled", False)]


def apply_expert_parallel(
    model: nn.Module, *, ep_mesh: DeviceMesh, expert_tp_mesh: DeviceMesh | None = None
) -> None:
    """Split every MoE layer's routed experts over ``ep_mesh``, and with ``expert_tp_mesh`` (the
    2-D ``(ep, tp)`` mesh of expert tensor parallel) each expert's hidden units over its TP
    dimension too; ``ValueError`` if the model has no MoE layer or a layer's experts (or their
    hidden units) do not divide evenly over the ranks."""
    layers = moe_layers(model)
    if not layers:
        raise ValueError(
            f"expert_parallel_degree {ep_mesh.size()} needs a mixture-of-experts model, but this "
            "model has no MoE layer; hint: choose an MoE flavor or set expert_parallel_degree = 1"
        )
    for moe in layers:
        uneven = experts_per_rank_problem(ep=ep_mesh.size(), num_experts=moe.num_experts)
        if uneven is not None:
            raise ValueError(f"parallelism.expert_parallel_degree: {uneven[0]}; hint: {uneven[1]}")
        if expert_tp_mesh is None:
            parallelize_module(moe.experts, ep_mesh, ExpertParallel())
            continue
        hidden_dims = getattr(moe.experts, "HIDDEN_DIMS", None)
        if hidden_dims is None:
            raise ValueError(
                f"{type(moe.experts).__name__} cannot be split by expert tensor parallel; hint: "
                "set parallelism.expert_tensor_parallel_degree = 1"
            )
        tp = expert_tp_mesh.size(1)
        for param_name, dim in hidden_dims.items():
            hidden = getattr(moe.experts, param_name).shape[dim]
            if hidden % tp:
                raise ValueError(
                    f"expert_tensor_parallel_degree ({tp}) must divide the experts' hidden size "
                    f"({hidden}): each TP rank holds the same share of every expert"
                )
        parallelize_module(moe.experts, expert_tp_mesh, ExpertTensorParallel(hidden_dims))


def shard_experts_with_fsdp(
    model: nn.Module,
    *,
    mesh: DeviceMesh,
    ep_degree: int,
    gradient_divide_factor: int,
    reshard_after_forward: bool,
    **shard_options: Any,
) -> None:
    """FSDP-shard each MoE layer's routed experts over ``mesh`` (the ranks EP left: ``efsdp``,
    with the replicas for HSDP) as units of their own, before the blocks are sharded over the
    full data-parallel mesh; ``shard_options`` are the blocks' other ``fully_shard`` options.

    Gradients are divided by the data-parallel degree like every other gradient, not by the
    size of ``mesh``. When the expert shards would be finer than the experts, FSDP shards dim 1
    instead (torchtitan's choice).
    """
    shard_size = mesh.size(mesh.ndim - 1)
    for moe in moe_layers(model):
        placement = None
        if shard_size * ep_degree > moe.num_experts:

            def placement(param: nn.Parameter) -> Shard:
                """Shard each expert's rows rather than the (too few) experts."""
                return Shard(1)

        fully_shard(
            moe.experts,
            mesh=mesh,
            reshard_after_forward=reshard_after_forward,
            shard_placement_fn=placement,
            **shard_options,
        )
        moe.experts.set_gradient_divide_factor(gradient_divide_factor)
        if shard_size > 1:
            # A divide factor other than the shard count is a pre-multiplied sum, which gloo
            # lacks; a plain sum, divided afterwards, runs on every backend. (With one shard
            # there is no reduce-scatter: FSDP divides by the factor itself, and forcing the
            # sum would divide a second time.)
            moe.experts.set_force_sum_reduction_for_comms(True)


__all__ = [
    "ExpertParallel",
    "ExpertTensorParallel",
    "apply_expert_parallel",
    "moe_layers",
    "shard_expert_dim",
    "shard_experts_with_fsdp",
    "summed_over",
    "with_grad_summed_over",
]
