"""Parallelizing a flux transformer as torchtitan v0.2.2 allowed: activation checkpointing of each
double- and single-stream block, then FSDP2 (or HSDP over a 2-D mesh) per embedder, per block and
for the final layer.

Flux has no tensor, pipeline, expert or context parallel plan here; the family's capabilities say
so, and the layout rules refuse those degrees before anything is built. The FSDP step is titan's
generic one (``titan.distributed.parallelize.apply_fsdp``), which takes its units from
``FluxModel.fsdp_units``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from titan.distributed.parallelize import apply_fsdp

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import ActivationCheckpointConfig

BLOCK_LISTS = ("double_blocks", "single_blocks")
"""The flux model's block lists, each block checkpointed on its own."""


def apply_flux_activation_checkpointing(
    model: nn.Module, *, config: ActivationCheckpointConfig
) -> None:
    """Wrap every double- and single-stream block in a ``checkpoint_wrapper`` unless
    ``config.mode`` is "none".

    Every mode checkpoints whole blocks: v0.2.2's flux did the same for any mode but "none"
    (it had no per-op or every-N-th policy for flux), so "selective" and "memory_budget" run
    as "full" here.
    """
    if config.mode == "none":
        return
    for list_name in BLOCK_LISTS:
        blocks = getattr(model, list_name)
        for name, block in list(blocks.named_children()):
            wrapped = checkpoint_wrapper(
                block,
                preserve_rng_state=config.preserve_rng_state,
                determinism_check=config.determinism_check,
                early_stop=config.early_stop,
                debug=config.debug,
            )
            blocks.register_module(name, wrapped)


def parallelize_flux(
    model: nn.Module,
    *,
    activation_checkpoint: ActivationCheckpointConfig,
    dp_mesh: DeviceMesh | None,
    param_dtype: torch.dtype = torch.float32,
    reduce_dtype: torch.dtype = torch.float32,
    cpu_offload: bool = False,
    reshard_after_forward: str = "default",
) -> nn.Module:
    """Checkpoint ``model``'s blocks as ``activation_checkpoint`` says, then shard it with FSDP2
    over ``dp_mesh`` (1-D: FSDP; 2-D replicate x shard: HSDP; ``None``: not sharded); returns
    ``model``.

    Call it on the model built on the meta device, before ``to_empty``/``init_weights``. The
    final layer stays gathered after its forward by default, as v0.2.2 kept it (backward needs
    it at once).
    """
    apply_flux_activation_checkpointing(model, config=activation_checkpoint)
    if dp_mesh is not None:
        apply_fsdp(
            model,
            dp_mesh=dp_mesh,
            param_dtype=param_dtype,
            reduce_dtype=reduce_dtype,
            reshard_after_forward=reshard_after_forward,
            cpu_offload=cpu_offload,
        )
    return model


__all__ = ["BLOCK_LISTS", "apply_flux_activation_checkpointing", "parallelize_flux"]
