"""Gradient-norm clipping that sees the whole model when gradients are FSDP / TP shards."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.distributed.tensor import DTensor


@torch.no_grad()
def clip_grad_norm_(
    parameters: Iterable[torch.Tensor] | torch.Tensor,
    max_norm: float,
    *,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """Scale the gradients of ``parameters`` in place so their total ``norm_type``-norm is at most
    ``max_norm``; return that total norm (before clipping) as a plain tensor on the grads' device.

    Parameters without a gradient are skipped. Gradients may be DTensors (FSDP shards, TP
    shards, replicated TP norms): the norm of a DTensor is a partial norm per rank, and
    ``full_tensor()`` all-reduces it into the norm of the whole unsharded gradient, so every rank
    clips with the same factor.
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(
        grads, norm_type=norm_type, error_if_nonfinite=error_if_nonfinite, foreach=foreach
    )
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total_norm, foreach=foreach)
    return total_norm
