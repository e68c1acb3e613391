"""Ranks that pass different numbers of micro-batches: ``policy_counts.py FOLDER CALL...``.

Under ``torchrun --nproc-per-node=2`` (FSDP over 2 ranks, gloo), rank r passes r + 2
micro-batches to each ``CALL`` in turn: ``forward_backward`` (GRPO), ``cross_entropy_step``, or
``loss_fn`` (``forward_backward`` with a loss of the caller's). For each call every rank prints
``RANK r CALL REFUSED: <message>`` for the refusal it gets (or ``RANK r CALL RAN`` if none) and
waits for the other at a barrier (so both have printed); a refused call leaves the trainer as it
was, so the next call starts clean. A rank exits 3 after any refusal.
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


def main(folder: str, calls: list[str]) -> int:
    """Build, make each mismatched call, report; the exit status."""
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
    for call in calls:
        mine = batches(rank + 2, policy=call == "forward_backward")
        try:
            if call == "loss_fn":
                trainer.forward_backward(mine, loss_fn=summed_cross_entropy)
            else:
                getattr(trainer, call)(mine)
            print(f"RANK {rank} {call} RAN", flush=True)
        except TrainerUsageError as error:
            print(f"RANK {rank} {call} REFUSED: {error}", flush=True)
            status = 3
        dist.barrier()
    trainer.close(wait_for_peers=True)
    return status


def summed_cross_entropy(logits: torch.Tensor, batch: Microbatch) -> torch.Tensor:
    """A caller's loss: the sum of the per-token cross entropies."""
    return torch.nn.functional.cross_entropy(
        logits.flatten(0, 1).float(), batch.labels.flatten(), reduction="sum"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
