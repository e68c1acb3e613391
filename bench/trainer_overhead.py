"""Time titan's training step against a plain PyTorch loop on the same model and batches.

Target: titan's step takes at most 1.03x the step of a minimal loop written directly against
torch. Everything runs in one process, with the same torch thread count, interleaved:

- ``titan (log_freq=1)``: ``llama3_debugmodel()`` with the registry's metrics frequency (a line
  to ``metrics.jsonl`` and to the console every step), built with ``config.build()``; each timed
  block is one call of ``Trainer.train()``, titan's real loop: GC pacing, ``to_device``,
  ``train_step`` (zero_grad, autocast forward, loss, backward, grad-norm clipping, optimizer and
  LR-schedule steps, metrics), the checkpoint and validation hooks and the profiler step.
- ``titan (log_freq=10)``: the same with ``MetricsProcessor.Config``'s default frequency.
- ``baseline: plain torch``: ``Llama3Model`` built from the same model config and initialised
  from the same seed (the bench checks that the weights are identical), ``torch.optim.AdamW``
  with the same hyperparameters (fused, titan's default implementation), ``torch.autocast`` to
  bfloat16 around the forward as titan does for one CPU process, ``F.cross_entropy``,
  ``torch.nn.utils.clip_grad_norm_``, a ``LambdaLR`` over the same schedule, ``zero_grad``.

What is compared, and why it is fair: the batches are fetched once from titan's data loader and
both sides iterate over that in-memory list (titan's ``dataloader`` is replaced by the list for
the timed blocks), so each side takes its batch from an equally cheap source and trains on the
same tokens in the same order. Tokenising ``c4_test`` is the loader's cost whichever loop
consumes it, so it is printed on its own line and counted on neither side. Choices that are not
loop overhead are the same on both sides: checkpointing and validation off (the registry
validates every 5 steps), activation checkpointing off (the registry recomputes every second
block, a memory trade the plain loop would not make), and titan's console output goes to a log
file, as in a batch job. titan pauses Python's garbage collector for the run and collects every
``training.gc_freq`` steps; the baseline shares the process, so it runs without the collector
too, and titan's own collections count against titan.

Blocks of ``--steps`` steps are interleaved in a rotating order (ABC, BCA, CAB, ...) after one
warm-up block each. The table shows the median and best per-step time over ``--repeats``
blocks, the ratio of the medians and the median of the per-repeat ratios ("paired": slow spells
of a shared machine hit neighbouring blocks alike, so this is the steadier figure and the one
the target is checked on), and minor page faults per step (allocator churn shows up there, see
bench/RESULTS.md). All three train the same run, so the losses must agree and the weights should
be identical at the end. One torch thread by default: on a 2-core machine shared with other
work, two OpenMP threads stall whenever the other core is busy (steps varied 0.4-5 s), while
one thread gives steady numbers; ``--threads 0`` keeps torch's own count.

    .venv/bin/python bench/trainer_overhead.py [--seq-len N] [--batch N] [--steps N]
        [--repeats N] [--threads N] [--seed N]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.03
BASELINE = "baseline: plain torch"


class PlainLoop:
    """The baseline: the loop anyone would write against torch, on titan's model class."""

    def __init__(self, trainer: Any, *, seed: int) -> None:
        config = trainer.config
        model_config = config.model_spec.model  # max_seq_len already set from training.seq_len
        with torch.device("meta"):
            self.model = model_config.build()
        self.model.to_empty(device="cpu")
        torch.manual_seed(seed)
        with torch.no_grad():
            self.model.init_weights()
        self.model.train()
        opt = config.optimizer
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=opt.lr,
            betas=(opt.beta1, opt.beta2),
            eps=opt.eps,
            weight_decay=opt.weight_decay,
            fused=True,
        )
        # The same schedule function titan's LambdaLR uses, so both runs see the same lrs.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, trainer.parts.lr_schedulers.lr_lambda
        )
        self.max_norm = float(config.training.max_norm)
        self.loss = float("nan")

    def train(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        model, optimizer = self.model, self.optimizer
        for inputs, labels in batches:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(inputs)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
            del logits
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_norm)
            optimizer.step()
            self.scheduler.step()
        self.loss = loss.item()


@dataclasses.dataclass
class Measured:
    """Per-step times (one per timed block) and minor page faults of one loop."""

    times: list[float] = dataclasses.field(default_factory=list)
    faults: int = 0


def _titan_trainer(args: argparse.Namespace, *, log_freq: int, total_steps: int, folder: Path):
    from titan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    config.dump_folder = str(folder)
    config.debug.seed = args.seed
    config.training.seq_len = args.seq_len
    config.training.local_batch_size = args.batch
    config.training.steps = total_steps  # the LR schedule's horizon, for both sides
    config.metrics.log_freq = log_freq
    config.checkpoint.enable = False
    config.validator.enable = False
    config.activation_checkpoint.mode = "none"
    # The console sink binds sys.stdout when it is built, and keeps writing to this file.
    console = open(folder / "console.log", "w", encoding="utf-8")  # noqa: SIM115
    with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
        trainer = config.build()
    return trainer, console


def _train_titan(batches: list, *, trainer: Any) -> None:
    """``Trainer.train()`` over the next ``len(batches)`` steps, fed from ``batches``."""
    trainer.parts.dataloader = batches
    trainer.config.training.steps = trainer.step + len(batches)
    trainer.train()


def _measure(runs: dict[str, Callable[[list], None]], *, blocks: list[list]) -> dict[str, Measured]:
    """Block 0 warms every loop up; then each block is run by every loop, in rotating order."""
    names = list(runs)
    measured = {name: Measured() for name in names}
    for name in names:  # includes step 1 (first-step logging) and the allocator's growth
        runs[name](blocks[0])
    for index, block in enumerate(blocks[1:]):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            runs[name](block)
            measured[name].times.append((time.perf_counter() - start) / len(block))
            measured[name].faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return measured


def _logged_loss(folder: Path, *, step: int) -> float | None:
    lines = (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    losses = {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}
    return losses.get(step)


def _max_weight_diff(model: torch.nn.Module, *, other: torch.nn.Module) -> float:
    pairs = zip(model.state_dict().values(), other.state_dict().values(), strict=True)
    return max((x - y).abs().max().item() for x, y in pairs)


def _paired(times: list[float], *, base: list[float]) -> float:
    return statistics.median(t / b for t, b in zip(times, base, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2, help="local batch size")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=21, help="timed blocks per loop")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads for every loop; 0 keeps torch's own"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    os.chdir(REPO)  # the registry's tokenizer and c4_test paths are relative to the repository
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        return _run(args, Path(tmp), stack)


def _run(args: argparse.Namespace, tmp: Path, stack: contextlib.ExitStack) -> int:
    total_steps = (args.repeats + 1) * args.steps
    trainers, folders = {}, {}
    for log_freq in (1, 10):
        name = f"titan (log_freq={log_freq})"
        folders[name] = tmp / f"log_freq_{log_freq}"
        folders[name].mkdir()
        trainer, console = _titan_trainer(
            args, log_freq=log_freq, total_steps=total_steps, folder=folders[name]
        )
        stack.callback(console.close)
        stack.callback(trainer.close)
        trainers[name] = trainer
    first = next(iter(trainers.values()))
    plain = PlainLoop(first, seed=args.seed)
    init_diff = _max_weight_diff(first.parts.model, other=plain.model)

    loader = iter(first.parts.dataloader)
    start = time.perf_counter()
    batches = [next(loader) for _ in range(total_steps)]
    fetch_ms = (time.perf_counter() - start) / total_steps * 1000
    blocks = [batches[i : i + args.steps] for i in range(0, total_steps, args.steps)]

    runs: dict[str, Callable[[list], None]] = {
        name: functools.partial(_train_titan, trainer=trainer) for name, trainer in trainers.items()
    }
    runs[BASELINE] = plain.train
    measured = _measure(runs, blocks=blocks)

    base = measured[BASELINE].times
    print(
        f"llama3 debugmodel, batch {args.batch} x seq {args.seq_len}, torch threads: "
        f"{torch.get_num_threads()}, {args.repeats} interleaved blocks of {args.steps} steps "
        "after 1 warm-up block each, the same batches for every loop"
    )
    loss_column = f"loss @{total_steps}"
    print(
        f"{'loop':<22} {'median ms':>10} {'best ms':>8} {'vs baseline':>12} {'paired':>7} "
        f"{'faults/step':>12} {loss_column:>11}"
    )
    for name, result in measured.items():
        loss = plain.loss if name == BASELINE else _logged_loss(folders[name], step=total_steps)
        median = statistics.median(result.times)
        print(
            f"{name:<22} {median * 1000:>10.1f} {min(result.times) * 1000:>8.1f} "
            f"{median / statistics.median(base):>11.3f}x {_paired(result.times, base=base):>6.3f}x "
            f"{result.faults / (args.repeats * args.steps):>12.0f} "
            f"{'not logged' if loss is None else f'{loss:.6f}':>11}"
        )
    print(f"data loader, timed on neither side: {fetch_ms:.1f} ms per batch (titan's c4_test)")
    end_diff = max(_max_weight_diff(t.parts.model, other=plain.model) for t in trainers.values())
    print(
        f"max |weight difference| titan vs baseline: {init_diff:.3g} at init, "
        f"{end_diff:.3g} after {total_steps} steps"
    )
    for name in trainers:
        paired = _paired(measured[name].times, base=base)
        verdict = "met" if paired <= TARGET else "NOT met"
        print(f"target: {name} <= {TARGET}x the baseline (paired): {verdict} ({paired:.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
