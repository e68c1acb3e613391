"""Ranks that pass different numbers of micro-batches: ``policy_counts.py FOLDER CALL``.

Under ``torchrun --nproc-per-node=2`` (FSDP over 2 ranks, gloo), rank r passes r + 2
micro-batches to ``CALL`` (``forward_backward`` or ``cross_entropy_step``). Each rank prints
``RANK r REFUSED: <message>`` for the refusal it gets (or ``RANK r RAN`` if none), waits for the
other at a barrier (so both have printed), then exits 3 after a refusal.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from titan.models.llama3.config_registry import llama3_debugmodel
from titan.rl import PolicyTrainer, policy_microbatch
from titan.training.step_api import Microbatch, TrainerUsageError


def batches(count: int, *, policy: bool) -> list:
    """``count`` good micro-batches of 2 x 16 tokens."""
    out = []
    for seed in range(count):
        tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(seed))
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        if policy:
            out.append(
                policy_microbatch(
                    token_ids=inputs,
                    labels=labels,
                    generator_logprobs=None,
                    advantages=torch.tensor([1.0, -1.0]),
                )
            )
        else:
            out.append(Microbatch(token_ids=inputs, labels=labels))
    return out


def main(folder: str, call: str) -> int:
    """Build, make the mismatched call, report; the exit status."""
    base = llama3_debugmodel()
    base.dump_folder = os.path.join(folder, "out")
    base.training.seq_len, base.training.local_batch_size = 16, 2
    base.training.global_batch_size = 4
    base.training.mixed_precision_param = "float32"
    base.validator.enable = False
    base.parallelism.data_parallel_shard_degree = 2
    trainer = PolicyTrainer.config_of(base).build()
    rank = dist.get_rank()
    status = 0
    try:
        getattr(trainer, call)(batches(rank + 2, policy=call == "forward_backward"))
        print(f"RANK {rank} RAN", flush=True)
    except TrainerUsageError as error:
        print(f"RANK {rank} REFUSED: {error}", flush=True)
        status = 3
    dist.barrier()
    trainer.close(wait_for_peers=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
