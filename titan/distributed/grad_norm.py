"""Gradient-norm clipping that sees the whole model when gradients are FSDP / TP shards."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@torch.no_grad()
def clip_grad_norm_(
    parameters: Iterable[torch.Tensor] | torch.Tensor,
    max_norm: float,
    *,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    pp_mesh: DeviceMesh | None = None,
) -> torch.Tensor:
    """Scale the gradients of ``parameters`` in place so their total ``norm_type``-norm is at most
    ``max_norm``; return that total norm (before clipping) as a plain tensor on the grads' device.

    Parameters without a gradient are skipped. Gradients may be DTensors (FSDP shards, TP
    shards, replicated TP norms, expert-parallel shards): the norm of a DTensor is a partial norm
    per rank, and ``full_tensor()`` all-reduces it into the norm of the whole unsharded gradient,
    so every rank clips with the same factor. Gradients on different meshes are normed apart and
    then combined. Under pipeline parallel (``pp_mesh``) each rank holds some stages: their
    norms are combined over the pipeline ranks, so every rank clips by the whole model's norm.
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    groups = _by_mesh([p for p in params if p.grad is not None])
    norms = [
        _full_norm(
            [p.grad for p in group],
            norm_type=norm_type,
            error_if_nonfinite=error_if_nonfinite,
            foreach=foreach,
        )
        for group in groups
    ]
    if len(norms) == 1:
        total_norm = norms[0]
    else:
        # The norm of the per-mesh norms is the norm of all gradients, for every p (and inf).
        total_norm = torch.linalg.vector_norm(torch.stack(norms), ord=norm_type)
    if pp_mesh is not None:
        total_norm = _across_stages(total_norm, norm_type=norm_type, pp_mesh=pp_mesh)
    for group in groups:
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, total_norm, foreach=foreach)
    return total_norm


def _across_stages(norm: torch.Tensor, *, norm_type: float, pp_mesh: DeviceMesh) -> torch.Tensor:
    """The norm of the stages' norms over the pipeline ranks (their largest for the inf-norm)."""
    group = pp_mesh.get_group()
    if math.isinf(norm_type):
        norm = norm.clone()
        dist.all_reduce(norm, op=dist.ReduceOp.MAX, group=group)
        return norm
    powered = norm.double() ** norm_type
    dist.all_reduce(powered, op=dist.ReduceOp.SUM, group=group)
    return (powered ** (1.0 / norm_type)).to(norm.dtype)


def _by_mesh(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """``params`` split by the device mesh of their DTensor gradients (plain ones together).

    DTensors on different meshes cannot meet in one DTensor op (a stacked norm, a foreach
    scale): under expert parallel the experts' gradients live on the (efsdp, ep) mesh, the rest
    on the FSDP mesh.
    """
    groups: list[tuple[object, list[torch.Tensor]]] = []
    for param in params:
        grad = param.grad
        mesh = grad.device_mesh if isinstance(grad, DTensor) else None
        for key, members in groups:
            if key == mesh:
                members.append(param)
                break
        else:
            groups.append((mesh, [param]))
    return [members for _, members in groups] or [[]]


def _full_norm(
    grads: list[torch.Tensor], *, norm_type: float, error_if_nonfinite: bool, foreach: bool | None
) -> torch.Tensor:
    """The ``norm_type``-norm of ``grads`` (one mesh), all-reduced to a plain tensor."""
    norm = torch.nn.utils.get_total_norm(
        grads, norm_type=norm_type, error_if_nonfinite=error_if_nonfinite, foreach=foreach
    )
    return norm.full_tensor() if isinstance(norm, DTensor) else norm
