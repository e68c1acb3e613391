"""Train one model in titan-train and in upstream torchtitan 0.3.0: same weights, same batches.

Each family in ``FAMILIES`` names a legacy TOML. titan-train trains it as titan's legacy form
does; ``titan-migrate --target torchtitan==0.3.0`` turns it into the registry function 0.3.0
trains. Both runs are shrunk and made comparable through flags and config fields, never by
editing the TOML: float32 parameters, ``--steps`` steps of ``--batch`` x ``--seq-len`` tokens,
seed 0, no activation checkpointing (0.3.0 has only per-operator selective AC where the legacy
file recomputes every second block: a memory trade, not part of the model), one CPU process with
``--threads`` torch threads.

- **Weights.** titan builds its model from seed 0 and writes it as Hugging Face safetensors
  through its state-dict adapter; 0.3.0 writes its own seed-0 model the same way (through its
  adapter, via ``bench/upstream_shim.py``). The bench compares the two files tensor by tensor
  (the HF q/k rotary permutation is applied by both adapters) and then starts 0.3.0 from titan's
  file, so both train the same numbers whether or not the initialisations agree.
- **Batches.** titan's data loader gives the batches (v0.2.2's packing: one token stream,
  causal attention across documents); 0.3.0 is fed the same tensors through the shim's
  ``FixedBatches``, with positions ``0..seq_len-1`` on every row, so its per-document
  block-causal mask is the plain causal mask and RoPE sees the same positions.
- **Processes.** titan runs in titan's environment (``.venv``), 0.3.0 in ``.venv-upstream``,
  each in a fresh process of this file (``--worker``), one after the other. They exchange the
  request, batches, weights and results as files in one folder; neither imports the other.

Printed: every step's loss in both, the largest loss difference (absolute and relative), and the
step-time ratio titan / torchtitan: the median of each run's steps after ``--warmup``, a step
being the time from one logged loss to the next (each trainer's own loop and logging, both fed
from batches in memory), in wall time and in the process's CPU time. On a shared machine the
wall time also counts waiting for a core, which hits the two runs (one after the other)
unevenly; the CPU time counts each run's own work and is the steadier figure.

Tolerances (as ``tests/upstream/test_upstream_train.py`` holds the same comparison): the first
step's loss is one float32 forward of the same function of the same numbers through other
kernels, so it must agree to ``--rel-tol`` (1e-5 relative; rounding alone is near 1e-7). Later
steps also go through clipping, AdamW and the schedule, whose rounding the next forward
amplifies (and in an MoE a rounding difference can move a token to another expert), so they are
held to ``--later-rel-tol`` (1e-4). A wrong label shift, mask, position or shape moves a
debug-model loss near 8 by far more from the first step. The exit status is 1 when a tolerance
is exceeded or a run fails, 2 for a usage error, else 0. A family that titan-train does not
train yet is reported on one line and skipped.

Not the same code on both sides, by design of 0.3.0: it trains language models only with
FlexAttention (on CPU the shim runs it eagerly: dense scores and a math backward, most of a
step at 4 x 256), always wraps the model in FSDP (one rank here: no communication, but its
parameter hooks run), fuses wq/wk/wv into one matrix and computes the loss in chunks.
``--upstream-attention sdpa`` times 0.3.0 with causal SDPA in flex's place (the shim checks that
every mask is plain causal), which leaves the trainers and the rest of the model to compare.
Both are one CPU process in float32: the ratio is a CPU ratio, not a GPU one.

    .venv/bin/python bench/vs_torchtitan.py [--family llama3|qwen3|all] [--shape default|small]
        [--batch N] [--seq-len N] [--steps N] [--warmup N] [--rel-tol X] [--later-rel-tol X]
        [--threads N] [--upstream-attention flex|sdpa] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TITAN_PYTHON = REPO / ".venv" / "bin" / "python"
UPSTREAM_PYTHON = REPO / ".venv-upstream" / "bin" / "python"
UPSTREAM_MAKE = "make .venv-upstream/.titan-upstream-installed"
TARGET = "torchtitan==0.3.0"
SEED = 0
FIRST_STEP_REL_TOL = 1e-5
LATER_STEPS_REL_TOL = 1e-4
WORKER_TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the comparison: a legacy TOML both trainers train."""

    name: str
    """titan's model family (the TOML's ``model.name``)."""
    flavor: str
    """The flavor the TOML names (``model.flavor``)."""
    toml: str
    """The legacy TOML, relative to the repository."""


FAMILIES = (
    Family(name="llama3", flavor="debugmodel", toml="legacy_configs/llama3/debug_model.toml"),
    Family(name="qwen3", flavor="debugmodel_moe", toml="legacy_configs/qwen3/qwen3_moe_debug.toml"),
)
SHAPES = {"default": (4, 256), "small": (2, 64)}
"""``--shape`` presets: (local batch size, sequence length)."""
UPSTREAM_ATTENTION = {
    "flex": "FlexAttention, as 0.3.0 trains language models (eager and dense on CPU)",
    "sdpa": "causal SDPA in place of flex (upstream_shim.use_causal_sdpa), as titan computes it",
}
"""``--upstream-attention`` choices."""

# Files of one family's run folder.
REQUEST = "request.json"
BATCHES = "batches.pt"
TITAN_WEIGHTS = "titan_initial"
UPSTREAM_WEIGHTS = "upstream_initial"
TITAN_RESULT = "titan.json"
UPSTREAM_RESULT = "upstream.json"
UPSTREAM_MODULE = "upstream_config.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's command line (the driver's; ``--worker`` is how it starts its runs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [family.name for family in FAMILIES]
    parser.add_argument("--family", choices=[*names, "all"], default="llama3")
    parser.add_argument(
        "--shape", choices=list(SHAPES), default="default", help="batch x seq_len preset"
    )
    parser.add_argument("--batch", type=int, help="local batch size (overrides --shape)")
    parser.add_argument("--seq-len", type=int, help="sequence length (overrides --shape)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument(
        "--warmup", type=int, default=2, help="first steps left out of the step-time median"
    )
    parser.add_argument(
        "--rel-tol",
        type=float,
        default=FIRST_STEP_REL_TOL,
        help="largest relative loss difference at the first step that still passes",
    )
    parser.add_argument(
        "--later-rel-tol",
        type=float,
        default=LATER_STEPS_REL_TOL,
        help="largest relative loss difference at any later step that still passes",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each run")
    parser.add_argument(
        "--upstream-attention",
        choices=list(UPSTREAM_ATTENTION),
        default="flex",
        help="how 0.3.0 computes attention: "
        + "; ".join(f"{name}: {what}" for name, what in UPSTREAM_ATTENTION.items()),
    )
    parser.add_argument("--keep", metavar="DIR", help="exchange folder to keep (default: temp)")
    parser.add_argument("--worker", choices=["titan", "upstream"], help=argparse.SUPPRESS)
    parser.add_argument("folder", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None and args.folder is not None:
        parser.error(f"unexpected argument {args.folder!r}")
    if args.worker is not None and args.folder is None:
        parser.error("--worker needs the run folder")
    batch, seq_len = SHAPES[args.shape]
    args.batch = batch if args.batch is None else args.batch
    args.seq_len = seq_len if args.seq_len is None else args.seq_len
    for name in ("batch", "seq_len", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup must leave at least one of the {args.steps} steps to time")
    return args


# ----------------------------------------------------------------------------------------------
# Workers: each runs in its own environment's interpreter, in a fresh process.


def _intervals(start: float, marks: list[float]) -> list[float]:
    """The time from ``start`` to the first mark, then from each mark to the next."""
    return [b - a for a, b in zip([start, *marks[:-1]], marks, strict=True)]


def titan_worker(folder: Path) -> None:
    """titan's side, in ``.venv``: batches and initial weights for both, then titan-train's run.

    Writes ``titan.json``: ``{"trains": false, "reason": ...}`` when titan-train refuses the
    family, else its losses and step times.
    """
    import torch

    from titan.cli.train_config import load
    from titan.components.checkpoint.hf import write_hf
    from titan.config.configurable import NotBuildableError

    request = json.loads((folder / REQUEST).read_text(encoding="utf-8"))
    torch.set_num_threads(request["threads"])
    flags = [
        "--job.config_file", str(REPO / request["toml"]),
        "--job.dump_folder", str(folder / "titan_dump"),
        "--training.steps", str(request["steps"]),
        "--training.local_batch_size", str(request["batch"]),
        "--training.seq_len", str(request["seq_len"]),
        "--training.mixed_precision_param", "float32",
        "--activation_checkpoint.mode", "none",
        "--debug.seed", str(SEED),
    ]  # fmt: skip
    findings = io.StringIO()
    loaded = load(flags, world_size=1, stdout=sys.stdout, stderr=findings)
    if loaded.config is None:
        raise SystemExit(f"titan-train refuses the run:\n{findings.getvalue()}")
    result = folder / TITAN_RESULT
    begin = time.perf_counter()
    try:
        trainer = loaded.config.build()
    except NotBuildableError as refusal:
        result.write_text(json.dumps({"trains": False, "reason": str(refusal)}), encoding="utf-8")
        return
    built = time.perf_counter()
    try:
        parts = trainer.parts
        loader = iter(parts.dataloader)
        batches = [next(loader) for _ in range(request["steps"])]
        torch.save([(inputs, labels) for inputs, labels in batches], folder / BATCHES)
        weights = folder / TITAN_WEIGHTS
        weights.mkdir(exist_ok=True)  # --keep may name a folder of an earlier run
        checkpointer = parts.checkpointer
        write_hf(
            str(weights),
            checkpointer.states["model"],
            sd_adapter=checkpointer.sd_adapter,
            dtype=torch.float32,
            config_json=None,
        )
        parts.dataloader = batches
        losses: list[float] = []
        logged_at: list[float] = []
        cpu_at: list[float] = []
        log = parts.metrics.log

        def record(*, step: int, loss: float, **rest: Any) -> None:
            logged_at.append(time.perf_counter())
            cpu_at.append(time.process_time())
            losses.append(float(loss))
            log(step=step, loss=loss, **rest)

        parts.metrics.log = record
        started, cpu_started = time.perf_counter(), time.process_time()
        trainer.train()
        done = time.perf_counter()
    finally:
        trainer.close()
    run = {
        "trains": True,
        "losses": losses,
        "step_seconds": _intervals(started, logged_at),
        "step_cpu_seconds": _intervals(cpu_started, cpu_at),
        "build_seconds": built - begin,
        "train_seconds": done - started,
    }
    result.write_text(json.dumps(run, indent=2), encoding="utf-8")


def upstream_worker(folder: Path) -> None:
    """0.3.0's side, in ``.venv-upstream``: its own seed-0 weights written for the comparison,
    then a run from titan's weights on titan's batches. Writes ``upstream.json``."""
    import torch
    import upstream_shim  # beside this file, so on sys.path when this file runs as a script
    from torchtitan.tools.logging import init_logger

    request = json.loads((folder / REQUEST).read_text(encoding="utf-8"))
    torch.set_num_threads(request["threads"])
    upstream_shim.apply()
    if request["upstream_attention"] == "sdpa":
        upstream_shim.use_causal_sdpa()
    init_logger()
    config = upstream_shim.load_config(folder / UPSTREAM_MODULE, request["function"])
    config.dump_folder = str(folder / "upstream_dump")
    config.training.steps = request["steps"]
    config.training.local_batch_size = request["batch"]
    config.training.seq_len = request["seq_len"]
    config.training.mixed_precision_param = "float32"
    config.activation_checkpoint = None  # 0.3.0's way of saying "no activation checkpointing"
    config.debug.seed = SEED
    batches = torch.load(folder / BATCHES, weights_only=True)
    run = upstream_shim.train(
        config,
        batches=batches,
        save_initial_weights=folder / UPSTREAM_WEIGHTS,
        initial_weights=folder / TITAN_WEIGHTS,
    )
    (folder / UPSTREAM_RESULT).write_text(
        json.dumps(dataclasses.asdict(run), indent=2), encoding="utf-8"
    )


# ----------------------------------------------------------------------------------------------
# Driver: in titan's environment; starts the workers and reads what they wrote.


class RunFailed(Exception):
    """A worker process failed; the message has its output's tail."""


def _start_worker(python: Path, role: str, folder: Path, *, threads: int) -> None:
    """Run this file as ``--worker ROLE FOLDER`` with ``python``; its output goes to
    ``FOLDER/ROLE.log``, whose tail a failure shows."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        PYTHONHASHSEED="0",
        # 0.3.0's data loader is never read (the batches are titan's), but building it opens
        # c4_test through `datasets`: keep its cache in the run folder and never go online.
        HF_DATASETS_CACHE=str(folder / "hf_datasets"),
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
    )
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    log = folder / f"{role}.log"
    command = [str(python), str(Path(__file__).resolve()), "--worker", role, str(folder)]
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            timeout=WORKER_TIMEOUT_S,
        )  # fmt: skip
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
        raise RunFailed(f"the {role} run failed (exit {done.returncode}); {log}:\n{tail}")


def _migrate(family: Family, folder: Path) -> str:
    """``titan-migrate --target torchtitan==0.3.0 TOML -o FOLDER/upstream_config.py``; the name
    of the function it wrote."""
    import ast

    from titan.cli import migrate

    module = folder / UPSTREAM_MODULE
    out, err = io.StringIO(), io.StringIO()
    command = ["--target", TARGET, str(REPO / family.toml), "-o", str(module)]
    if migrate.run(command, stdout=out, stderr=err) != 0:
        raise RunFailed(
            f"titan-migrate {' '.join(command)} failed:\n{out.getvalue()}{err.getvalue()}"
        )
    tree = ast.parse(module.read_text(encoding="utf-8"))
    [function] = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    return function


@dataclasses.dataclass
class Weights:
    """How titan's and 0.3.0's seed-0 initial weights compare, in Hugging Face layout."""

    tensors: int
    """How many tensors each export has (the same names in both, or the bench stops)."""
    differing: list[str]
    """HF names of the tensors that are not bitwise equal, sorted."""
    max_abs_diff: float
    """The largest elementwise difference among them (inf for another shape or dtype)."""

    def describe(self) -> str:
        """What the two initialisations have in common, to follow "titan's and 0.3.0's"."""
        if not self.differing:
            return f"are bitwise identical ({self.tensors} tensors)"
        return (
            f"differ in {len(self.differing)} of {self.tensors} tensors (max |difference| "
            f"{self.max_abs_diff:.3g}, e.g. {self.differing[0]})"
        )


def compare_weights(titan: Path, upstream: Path) -> Weights:
    """Compare two Hugging Face safetensors folders tensor by tensor."""
    import torch
    from safetensors.torch import load_file

    ours: dict[str, torch.Tensor] = {}
    theirs: dict[str, torch.Tensor] = {}
    for folder, tensors in ((titan, ours), (upstream, theirs)):
        for file in sorted(folder.glob("*.safetensors")):
            tensors.update(load_file(str(file)))
    if set(ours) != set(theirs):
        only = sorted(set(ours) ^ set(theirs))
        raise RunFailed(f"titan's and 0.3.0's Hugging Face exports name other tensors: {only[:5]}")
    differing, worst = [], 0.0
    for key in sorted(ours):
        a, b = ours[key], theirs[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            differing.append(key)
            worst = math.inf
        elif not torch.equal(a, b):
            differing.append(key)
            worst = max(worst, (a.double() - b.double()).abs().max().item())
    return Weights(tensors=len(ours), differing=differing, max_abs_diff=worst)


@dataclasses.dataclass
class Comparison:
    """One family's result."""

    family: Family
    titan: dict[str, Any]
    """What titan's worker wrote (``titan.json``)."""
    upstream: dict[str, Any]
    """What 0.3.0's worker wrote (``upstream.json``, the shim's ``Run``)."""
    weights: Weights

    @property
    def abs_diffs(self) -> list[float]:
        """|titan's loss - 0.3.0's loss| at each step."""
        return [
            abs(a - b) for a, b in zip(self.titan["losses"], self.upstream["losses"], strict=True)
        ]

    @property
    def rel_diffs(self) -> list[float]:
        """Each step's difference relative to 0.3.0's loss."""
        return [d / abs(b) for d, b in zip(self.abs_diffs, self.upstream["losses"], strict=True)]

    def step_time_ratio(self, warmup: int, *, clock: str) -> tuple[float, float, float]:
        """(titan median, 0.3.0 median, titan / 0.3.0) over the steps after ``warmup``;
        ``clock`` is ``step_seconds`` (wall) or ``step_cpu_seconds`` (the process's CPU)."""
        ours = statistics.median(self.titan[clock][warmup:])
        theirs = statistics.median(self.upstream[clock][warmup:])
        return ours, theirs, ours / theirs


def compare(family: Family, args: argparse.Namespace, folder: Path) -> Comparison | str:
    """Both runs of ``family`` in ``folder``; the reason instead when titan does not train it."""
    folder.mkdir(parents=True, exist_ok=True)
    function = _migrate(family, folder)
    request = {
        "toml": family.toml,
        "function": function,
        "steps": args.steps,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "threads": args.threads,
        "upstream_attention": args.upstream_attention,
    }
    (folder / REQUEST).write_text(json.dumps(request, indent=2), encoding="utf-8")
    _start_worker(TITAN_PYTHON, "titan", folder, threads=args.threads)
    titan = json.loads((folder / TITAN_RESULT).read_text(encoding="utf-8"))
    if not titan["trains"]:
        return titan["reason"]
    _start_worker(UPSTREAM_PYTHON, "upstream", folder, threads=args.threads)
    upstream = json.loads((folder / UPSTREAM_RESULT).read_text(encoding="utf-8"))
    for name, run in (("titan", titan), ("torchtitan", upstream)):
        if len(run["losses"]) != args.steps:
            raise RunFailed(f"{name} logged {len(run['losses'])} losses for {args.steps} steps")
    weights = compare_weights(folder / TITAN_WEIGHTS, folder / UPSTREAM_WEIGHTS)
    return Comparison(family=family, titan=titan, upstream=upstream, weights=weights)


def report(result: Comparison, args: argparse.Namespace) -> bool:
    """Print one family's comparison; whether its losses are within the tolerance."""
    titan, upstream = result.titan, result.upstream
    print("step  titan loss            torchtitan loss       |difference|  relative")
    for step, (ours, theirs, diff, rel) in enumerate(
        zip(titan["losses"], upstream["losses"], result.abs_diffs, result.rel_diffs, strict=True),
        start=1,
    ):
        print(f"{step:>4}  {ours:<20.17g}  {theirs:<20.17g}  {diff:<12.3g}  {rel:.3g}")
    first, *later = result.rel_diffs
    worst_later = max(later, default=0.0)
    ok = first <= args.rel_tol and worst_later <= args.later_rel_tol
    print(
        f"max |loss difference|: {max(result.abs_diffs):.3g} (relative "
        f"{max(result.rel_diffs):.3g}); step 1: {first:.3g} relative, tolerance "
        f"{args.rel_tol:g}; later steps: {worst_later:.3g}, tolerance {args.later_rel_tol:g}: "
        f"{'ok' if ok else 'EXCEEDED'}"
    )
    timed = f"steps {args.warmup + 1}-{args.steps}"
    for clock, name in (("step_seconds", "wall"), ("step_cpu_seconds", "CPU")):
        ours, theirs, ratio = result.step_time_ratio(args.warmup, clock=clock)
        print(
            f"step time ({name}), median of {timed}: titan {ours * 1000:.1f} ms, torchtitan "
            f"{theirs * 1000:.1f} ms; titan / torchtitan = {ratio:.3f}x"
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    """The bench (driver) or one of its runs (``--worker``); returns the exit status."""
    args = parse_args(argv)
    if args.worker == "titan":
        titan_worker(Path(args.folder))
        return 0
    if args.worker == "upstream":
        upstream_worker(Path(args.folder))
        return 0
    for python, hint in (
        (TITAN_PYTHON, "make .venv/.titan-installed"),
        (UPSTREAM_PYTHON, UPSTREAM_MAKE),
    ):
        if not python.exists():
            print(f"vs_torchtitan: {python} does not exist; run `{hint}` first", file=sys.stderr)
            return 2
    families = [f for f in FAMILIES if args.family in ("all", f.name)]
    failed = False
    with contextlib.ExitStack() as stack:
        root = (
            Path(args.keep)
            if args.keep
            else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        for family in families:
            print(
                f"== {family.name} {family.flavor} ({family.toml}): titan-train vs torchtitan "
                f"0.3.0, float32, CPU, batch {args.batch} x seq {args.seq_len}, {args.steps} "
                f"steps, {args.threads} torch thread(s), seed {SEED}; torchtitan's attention: "
                f"{UPSTREAM_ATTENTION[args.upstream_attention]}"
            )
            try:
                result = compare(family, args, root / family.name)
            except RunFailed as error:
                print(f"FAILED: {error}")
                failed = True
                continue
            if isinstance(result, str):
                print(f"titan does not train {family.name} yet, so nothing is compared: {result}")
                continue
            print(
                f"initial weights (seed {SEED}, HF layout): titan's and torchtitan's "
                f"{result.weights.describe()}; torchtitan starts from titan's"
            )
            failed |= not report(result, args)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
