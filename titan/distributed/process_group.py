"""Starting torch.distributed from torchrun's environment, and the collective timeouts."""

from __future__ import annotations

import dataclasses
import logging
import os
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _set_pg_timeout

from titan.distributed import pipeline_waits
from titan.distributed.roll_call import joined, roll_call

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import CommConfig

logger = logging.getLogger(__name__)

# Backend per device type. On CUDA the CPU half is gloo as well, so CPU tensors (the seed
# broadcast, DCP's metadata exchange, a CPU loss) can still be all-reduced.
BACKEND_OF_DEVICE_TYPE = {"cpu": "gloo", "cuda": "cpu:gloo,cuda:nccl"}

# NCCL flight recorder settings torchtitan exports; they only mean something to NCCL.
ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
# The flight recorder needs "skip cleanup" (3): mode 1 aborts the work it would dump
# (pytorch/pytorch#121055).
SKIP_CLEANUP = "3"
TRACE_BUFFER_SIZE = "TORCH_FR_BUFFER_SIZE"
TRACE_FILE = "TORCH_FR_DUMP_TEMP_FILE"
DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
# After the last barrier every rank is seconds from leaving; one that is not has died since.
LEAVE_TIMEOUT_SECONDS = 60.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProcessPlacement:
    """Where this process sits in the job and which device it computes on."""

    world_size: int
    """Number of processes in the job (1 when not launched by torchrun)."""
    rank: int
    """Global rank of this process."""
    local_rank: int
    """Rank of this process on its host; picks its GPU."""
    device: torch.device
    """The device this process trains on: ``cuda:<local_rank>`` or ``cpu``."""


def default_device_type() -> str:
    """ "cuda" when a GPU is visible, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def init_distributed(
    comm: CommConfig, *, device_type: str | None = None, dump_folder: str = "."
) -> ProcessPlacement:
    """Start the default process group from torchrun's WORLD_SIZE / RANK / LOCAL_RANK.

    Without WORLD_SIZE (a plain ``python`` launch) nothing is started and the world is one
    process. On CUDA the process's GPU is set from LOCAL_RANK before the group starts.
    ``comm.mode = "fake_backend"`` starts torch's fake backend for NGPU ranks (a dry run: every
    collective returns at once without communicating).
    """
    device_type = device_type or default_device_type()
    if device_type not in BACKEND_OF_DEVICE_TYPE:
        raise ValueError(
            f"titan-train runs on cpu or cuda, not {device_type!r}; "
            f"known: {', '.join(BACKEND_OF_DEVICE_TYPE)}"
        )
    if comm.mode == "local_tensor":
        raise ValueError(
            "comm.mode = 'local_tensor' is not supported by titan-train yet; "
            "use 'default' or 'fake_backend'"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _claim_device(device_type, local_rank)
    if comm.mode == "fake_backend":
        return _init_fake_backend(device=device, local_rank=local_rank)
    if "WORLD_SIZE" not in os.environ:
        return ProcessPlacement(world_size=1, rank=0, local_rank=0, device=device)
    if dist.is_initialized():
        logger.warning("torch.distributed was already started; comm settings are not applied")
    else:
        if device_type == "cuda":
            _export_flight_recorder_env(comm, dump_folder=dump_folder)
        _start_process_group(BACKEND_OF_DEVICE_TYPE[device_type], comm=comm)
    return ProcessPlacement(
        world_size=dist.get_world_size(),
        rank=dist.get_rank(),
        local_rank=local_rank,
        device=device,
    )


def set_train_timeout(comm: CommConfig, *, world_mesh: DeviceMesh | None) -> None:
    """Lower every group's collective timeout to ``comm.train_timeout_seconds`` (call after the
    first step, whose compilation and warm-up may need the longer init timeout).

    Works on gloo and NCCL. Synchronises with a barrier first: otherwise a fast rank could issue
    collectives under the short timeout while a slow one is still inside the long first step.
    """
    if not dist.is_initialized() or dist.get_backend() == "fake":
        return
    timeout = timedelta(seconds=comm.train_timeout_seconds)
    dist.barrier()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    groups: list[dist.ProcessGroup | None] = [None]  # None is the default (world) group
    if world_mesh is not None:
        groups += world_mesh.get_all_groups()
        root = world_mesh._get_root_mesh()
        groups += [flat.get_group() for flat in root._flatten_mapping.values()]
    for group in groups:
        _set_pg_timeout(timeout, group)
    pipeline_waits.set_timeout(timeout)
    logger.info("collective timeout set to %s", timeout)


def destroy_distributed(*, wait_for_peers: bool = True) -> None:
    """Shut the default process group down, if one was started (end of training).

    ``wait_for_peers=False`` after a failure, when other ranks may never reach the barrier.
    """
    if dist.is_initialized():
        if wait_for_peers:
            # Every rank must be done with its last collective before any rank closes its
            # connections: gloo work still in flight on a peer aborts that process at exit
            # ("terminate called without an active exception"). The barrier's own last
            # message may still be in flight when it returns here, so the ranks then also
            # agree through the store that every barrier has returned.
            dist.barrier()
            ranks = joined()
            if ranks is not None:
                ranks.leave(timeout_s=LEAVE_TIMEOUT_SECONDS)
        dist.destroy_process_group()


def _start_process_group(backend: str, *, comm: CommConfig) -> None:
    """``init_process_group`` on torchrun's store, once every rank has joined the roll call (so
    a missing rank is named within ``comm.init_timeout_seconds`` instead of gloo or NCCL waiting
    silently for it)."""
    timeout_s = comm.init_timeout_seconds
    pipeline_waits.set_timeout(timedelta(seconds=timeout_s))
    ranks = roll_call(timeout_s=timeout_s)
    if ranks is None:  # WORLD_SIZE without a store address: torch's own env:// errors apply
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
        return
    ranks.join(timeout_s=timeout_s)
    dist.init_process_group(
        backend=backend,
        store=ranks.process_group_store(timeout_s=timeout_s),
        rank=ranks.rank,
        world_size=ranks.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def _claim_device(device_type: str, local_rank: int) -> torch.device:
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device_type 'cuda' was asked for but no GPU is visible")
        # Before init_process_group, so NCCL binds this rank's communicator to its own GPU.
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _init_fake_backend(*, device: torch.device, local_rank: int) -> ProcessPlacement:
    ngpu = os.environ.get("NGPU")
    if ngpu is None or not ngpu.isdigit() or int(ngpu) < 1:
        raise ValueError(
            f"comm.mode = 'fake_backend' needs NGPU set to the number of ranks to simulate, "
            f"got NGPU={ngpu!r}"
        )
    world_size, rank = int(ngpu), int(os.environ.get("RANK", "0"))
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK must be in [0, {world_size}) for fake_backend, got {rank}")
    dist.init_process_group("fake", rank=rank, world_size=world_size)
    return ProcessPlacement(world_size=world_size, rank=rank, local_rank=local_rank, device=device)


def _export_flight_recorder_env(comm: CommConfig, *, dump_folder: str) -> None:
    def export(name: str, value: str) -> None:
        if name in os.environ and os.environ[name] != value:
            logger.warning(
                "%s=%s is overridden to %s by comm config", name, os.environ[name], value
            )
        os.environ[name] = value

    export(ASYNC_ERROR_HANDLING, SKIP_CLEANUP)
    export(TRACE_BUFFER_SIZE, str(comm.trace_buf_size))
    if comm.trace_buf_size > 0:
        dump_dir = os.path.join(dump_folder, comm.save_traces_folder)
        os.makedirs(dump_dir, exist_ok=True)
        export(DUMP_ON_TIMEOUT, "1")
        export(TRACE_FILE, os.path.join(dump_dir, comm.save_traces_file_prefix))
