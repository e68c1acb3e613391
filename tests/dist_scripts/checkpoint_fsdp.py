"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU): sharded checkpoints of an FSDP2 model.

Usage: ``checkpoint_fsdp.py DUMP_FOLDER``. Saves a sharded checkpoint in the background while
training goes on, resumes it in a fresh run (every rank's shards, optimizer state, data position
and RNG exactly), then exports and re-imports Hugging Face safetensors. Rank 0 prints ``OK``;
any mismatch raises, so the launch fails.
"""

from __future__ import annotations

import os
import random
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tests.tiny_checkpoint_run import RenamingAdapter, tiny_run


def main(dump_folder: str) -> None:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,))

    def shard(model: torch.nn.Module) -> None:
        fully_shard(model.inp, mesh=mesh)
        fully_shard(model.out, mesh=mesh)
        fully_shard(model, mesh=mesh)

    torch.manual_seed(0)
    run = tiny_run(dump_folder, parallelize=shard, interval=2, async_mode="async")
    run.train(2)
    # Different generator states per rank: a rank that got another rank's RNG back would show.
    torch.manual_seed(100 + dist.get_rank())
    random.seed(100 + dist.get_rank())
    run.manager.save(2)
    params, moments = run.params(), run.optimizer_tensors()
    draws = run.draws()
    run.train(1)  # changes the weights while the save may still be writing
    run.manager.close()

    torch.manual_seed(1)
    resumed = tiny_run(dump_folder, parallelize=shard, sd_adapter=RenamingAdapter(), interval=2)
    assert resumed.manager.load()
    _same(resumed.params(), params, "parameter shards")
    _same(resumed.optimizer_tensors(), moments, "optimizer shards")
    assert resumed.draws() == draws, "RNG differs after resuming"
    assert (resumed.loader.value, resumed.train_state.value) == (8, 2)

    export = os.path.join(dump_folder, "export")
    exporter = tiny_run(
        export, parallelize=shard, sd_adapter=RenamingAdapter(), last_save_in_hf=True
    )
    exporter.model.load_state_dict(resumed.model.state_dict())
    exporter.manager.save(9, last_step=True)
    importer = tiny_run(
        os.path.join(dump_folder, "import"),
        parallelize=shard,
        sd_adapter=RenamingAdapter(),
        initial_load_path=os.path.join(export, "checkpoint", "step-9"),
        initial_load_in_hf=True,
    )
    assert importer.manager.load()
    _same(importer.params(), params, "parameter shards after the Hugging Face round trip")

    dist.barrier()
    if dist.get_rank() == 0:
        print("OK")
    dist.destroy_process_group()


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], what: str) -> None:
    assert got.keys() == want.keys(), f"{what}: keys {sorted(got)} != {sorted(want)}"
    for key, value in want.items():
        assert torch.equal(got[key], value), f"{what}: {key} differs on rank {dist.get_rank()}"


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_and_leave(main, sys.argv[1])
