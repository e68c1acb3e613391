"""One seed for every rank, and the switches for deterministic kernels."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import DebugConfig

logger = logging.getLogger(__name__)

# cuBLAS is only deterministic with a fixed workspace (see torch.use_deterministic_algorithms).
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def set_determinism(
    world_mesh: DeviceMesh | None,
    *,
    device: torch.device,
    debug: DebugConfig,
) -> int | None:
    """Seed every RNG with one seed shared by all ranks, and turn on deterministic kernels when
    ``debug.deterministic``. Returns the seed used (None for a single process without a seed).

    Without ``debug.seed``, rank 0's current RNG state picks the seed and is broadcast, so the
    ranks still agree. Every rank gets the *same* seed, pipeline ranks included (torchtitan seeds
    each pipeline rank differently, ``distinct_seed_mesh_dims=["pp"]``, so its pipelined weights
    depend on the pipeline degree). Dropout-free training does not need distinct seeds; model
    init relies on identical seeds so that every rank initialises the same full weights before
    sharding, and every pipeline stage takes its modules' weights from the stream the whole
    model draws from (``titan.training.weights``, ``titan.training.stage_init``), so a
    pipelined run starts from the weights of the same run without pipeline parallel.
    """
    if debug.deterministic:
        logger.info("deterministic algorithms enabled (expect slower kernels)")
        torch.use_deterministic_algorithms(True, warn_only=debug.deterministic_warn_only)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        # Deterministic mode fills torch.empty() with NaN otherwise; buffers that are written
        # later (rope tables, gathered FSDP parameters) would pay a kernel for nothing.
        torch.utils.deterministic.fill_uninitialized_memory = False
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG

    seed = debug.seed
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    if not distributed:
        if seed is not None:
            _seed_everything(seed)
        return seed

    if seed is None:
        state = torch.get_rng_state()[:8].to(_collective_device(device))
        dist.broadcast(state, src=0)
        seed = state.cpu().view(torch.uint64).item()
    _seed_everything(seed)
    if world_mesh is not None and device.type != "cpu":
        # DTensor's random ops (sharded init, dropout on DTensors) keep an offset-based tracker
        # on the accelerator; it exists on GPU meshes only and warns on CPU ones.
        from torch.distributed.tensor._random import manual_seed as dtensor_manual_seed

        dtensor_manual_seed(seed, world_mesh)
    logger.debug("rank %d seeded with %d", dist.get_rank(), seed)
    return seed


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    # PYTHONHASHSEED must be in [0, 2**32 - 1].
    os.environ["PYTHONHASHSEED"] = str(seed % 2**32)


def _collective_device(device: torch.device) -> torch.device:
    # A gloo-only group (CPU training) cannot broadcast a CUDA tensor and NCCL cannot broadcast a
    # CPU one; the mixed "cpu:gloo,cuda:nccl" group takes either.
    return device if dist.get_backend() != "gloo" else torch.device("cpu")
