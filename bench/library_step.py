"""Time the library step (``forward_backward`` + ``optim_step``) against ``train()``'s step.

Target: the library step takes at most 1.03x ``Trainer.train_step`` (the step ``train()`` runs)
on the same batches. Both trainers are ``llama3_debugmodel()`` built with ``config.build()`` from
the same seed in one process (checkpointing, validation and activation checkpointing off,
metrics every 1000 steps so neither side logs), with one torch thread. The batches are fetched
once from the loader and both sides train on the same list, so the weights must be identical at
the end (the bench checks it). What the library adds per call: checking the micro-batches,
counting valid tokens (one host sync) and reducing the metrics.

Blocks of ``--steps`` steps alternate (AB, BA, ...) after one warm-up block each; the paired
median ratio (per-repeat ratios) is the figure the target is checked on.

    .venv/bin/python bench/library_step.py [--seq-len N] [--batch N] [--steps N] [--repeats N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time

import torch


def trainer(dump: str, *, seq_len: int, batch: int, steps: int):
    """A built ``llama3_debugmodel()`` trainer for the bench."""
    from titan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    config.dump_folder = dump
    config.training.seq_len, config.training.local_batch_size = seq_len, batch
    config.training.steps = steps
    config.debug.seed = 0
    config.validator.enable = False
    config.activation_checkpoint.mode = "none"
    config.metrics.log_freq = 1000
    return config.build()


def main() -> None:
    """Run the interleaved blocks and print the table and the target's verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=7, help="timed blocks per side")
    args = parser.parse_args()
    torch.set_num_threads(1)
    total = args.steps * (args.repeats + 1)
    with tempfile.TemporaryDirectory() as dump:
        sizes = {"seq_len": args.seq_len, "batch": args.batch, "steps": total}
        cli = trainer(f"{dump}/cli", **sizes)
        lib = trainer(f"{dump}/lib", **sizes)
        loader = iter(cli.parts.dataloader)
        batches = [cli.parts.to_device(next(loader)) for _ in range(total)]

        def train_block(block: list) -> None:
            """``train()``'s step on each batch."""
            for item in block:
                cli.step += 1
                cli.train_step([item])

        def library_block(block: list) -> None:
            """The library calls on each batch."""
            for item in block:
                lib.forward_backward([item])
                lib.optim_step()

        sides = {"train() step": train_block, "forward_backward + optim_step": library_block}
        times: dict[str, list[float]] = {name: [] for name in sides}
        faults: dict[str, list[float]] = {name: [] for name in sides}
        blocks = [batches[i : i + args.steps] for i in range(0, total, args.steps)]
        for repeat, block in enumerate(blocks):
            order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
            for name in order:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                begin = time.perf_counter()
                sides[name](block)
                if repeat:  # the first block warms up
                    times[name].append((time.perf_counter() - begin) / args.steps * 1000)
                    minflt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
                    faults[name].append(minflt / args.steps)
        same = all(
            torch.equal(a, b)
            for a, b in zip(
                cli.model_state_dict().values(), lib.model_state_dict().values(), strict=True
            )
        )
        cli.close()
        lib.close()
    base = times["train() step"]
    print(
        f"llama3 debugmodel, batch {args.batch} x seq {args.seq_len}, torch threads: 1, "
        f"{args.repeats} alternating blocks of {args.steps} steps after one warm-up block each"
    )
    print(f"{'side':32} {'median ms':>10} {'best ms':>8} {'paired':>7} {'faults/step':>12}")
    for name, values in times.items():
        paired = statistics.median(v / b for v, b in zip(values, base, strict=True))
        print(
            f"{name:32} {statistics.median(values):10.1f} {min(values):8.1f} {paired:6.3f}x "
            f"{statistics.median(faults[name]):12.0f}"
        )
    ratio = statistics.median(v / b for v, b in zip(times[name], base, strict=True))
    print(f"weights identical after {total} steps: {same}")
    verdict = "met" if ratio <= 1.03 else "missed"
    print(f"target: library step <= 1.03x train()'s step (paired): {verdict} ({ratio:.3f}x)")


if __name__ == "__main__":
    main()
