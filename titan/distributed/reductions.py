"""All-reduces of a logged scalar (the loss, the grad norm) over a mesh, returning a float."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def dist_mean(x: torch.Tensor, mesh: DeviceMesh | None = None) -> float:
    """The mean of scalar ``x`` over the ranks of ``mesh``; ``x`` itself when ``mesh`` is None."""
    # gloo has no AVG reduction, so every backend sums and divides.
    return _all_reduce(x, mesh=mesh, op=dist.ReduceOp.SUM) / (1 if mesh is None else mesh.size())


def dist_max(x: torch.Tensor, mesh: DeviceMesh | None = None) -> float:
    """The largest value of scalar ``x`` over the ranks of ``mesh``."""
    return _all_reduce(x, mesh=mesh, op=dist.ReduceOp.MAX)


def dist_min(x: torch.Tensor, mesh: DeviceMesh | None = None) -> float:
    """The smallest value of scalar ``x`` over the ranks of ``mesh`` (e.g. "all ranks have data")."""
    return _all_reduce(x, mesh=mesh, op=dist.ReduceOp.MIN)


def dist_sum(x: torch.Tensor, mesh: DeviceMesh | None = None) -> float:
    """The sum of scalar ``x`` over the ranks of ``mesh`` (e.g. tokens seen)."""
    return _all_reduce(x, mesh=mesh, op=dist.ReduceOp.SUM)


def _all_reduce(x: torch.Tensor, *, mesh: DeviceMesh | None, op: dist.ReduceOp) -> float:
    # A loss computed under loss parallel is a replicated DTensor; reduce its local value.
    local = x.full_tensor() if isinstance(x, DTensor) else x
    # float64 keeps sums of many token-weighted losses exact enough; gloo and NCCL both have it.
    dtype = torch.float64 if local.dtype == torch.float64 else torch.float32
    reduced = local.detach().to(dtype).clone()
    if mesh is not None:
        dist.all_reduce(reduced, op=op, group=mesh.get_group())
    return reduced.item()
