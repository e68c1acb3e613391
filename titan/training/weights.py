"""Real weights for a model built on the meta device, the same for every parallel layout."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from titan.distributed.parallel_dims import ParallelDims

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def init_weights(
    model: torch.nn.Module,
    model_config: Any,
    parallel_dims: ParallelDims,
    training: Any,
    device: torch.device,
) -> None:
    """Real storage for the meta model, initialised from the (shared) seed.

    On CUDA each shard draws its own part of the full random tensor (DTensor's RNG tracker). On
    CPU torch has no such tracker and every shard would draw the same values, so the full model
    is initialised once and its shards are loaded from it: the same weights as a one-process run.
    A pipeline stage (``model`` holds some of the modules) takes its own modules' weights from
    that full model on CPU, for the same reason: drawn on its own, a stage would draw the
    embeddings' random numbers for its first block. On an accelerator a stage first skips the
    draws of the modules before it (``titan.training.stage_init``), one module at a time.
    """
    init_device = torch.device("cpu") if training.enable_cpu_offload else device
    buffer_device = device if training.enable_cpu_offload else None
    model.to_empty(device=init_device)
    sharded = parallel_dims.fsdp_enabled or parallel_dims.tp_enabled or parallel_dims.pp_enabled
    with torch.no_grad():
        if not (sharded and device.type == "cpu"):
            if parallel_dims.pp_enabled:
                from titan.training.stage_init import skip_earlier_draws

                with torch.device("meta"), default_dtype(DTYPES[training.dtype]):
                    whole = model_config.build()
                skip_earlier_draws(model, whole, device=init_device)
            model.init_weights(buffer_device=buffer_device)
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            set_model_state_dict,
        )

        # Built on meta like the one-process model: building on CPU would run every module's
        # reset_parameters, drawing from the RNG and shifting init_weights' draws.
        with torch.device("meta"), default_dtype(DTYPES[training.dtype]):
            full = model_config.build()
        full.to_empty(device="cpu")
        full.init_weights()
        model.init_buffers(buffer_device)
        own = get_model_state_dict(model).keys()  # a stage's keys: those of its modules
        weights = {key: value for key, value in full.state_dict().items() if key in own}
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
