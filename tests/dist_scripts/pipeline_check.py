"""Run under ``torchrun`` (gloo, CPU): a pipelined llama3 against one process, step by step.

``pipeline_check.py SCENARIO...``: each scenario builds a tiny llama3's stages with the
trainer's own code (``build_pipeline_step``: split, parallelize, initialise, schedule), trains
them for ``STEPS`` AdamW steps, and at every step compares the loss, the clipped gradient norm
and every gradient with those of the unsplit model on one process, loaded with the stages'
current weights and run on the whole batch (the rows of every data-parallel rank) at once.
Rank 0 prints ``OK <scenario> ...`` per scenario; any mismatch raises, so the launch fails.
Each schedule torch lowers itself is also written in both of its CSV formats and read back by
titan's reader (``titan.schemas.pipeline_csv``), which must not refuse what torch runs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys

import torch
import torch.distributed as dist
from titan.schemas.pipeline_csv import read_schedule_csv
from torch.distributed.tensor import DTensor

from tests.dist_scripts.parallel_check import build_on_meta, clean_fqn, model_config
from titan.components.loss import cross_entropy_loss
from titan.config.configs import (
    ActivationCheckpointConfig,
    CompileConfig,
    ParallelismConfig,
    TrainingConfig,
)
from titan.distributed.grad_norm import clip_grad_norm_
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.parallelize import parallelize_model
from titan.distributed.reductions import dist_mean
from titan.models.llama3 import model_registry
from titan.training.pipeline_step import build_pipeline_step
from titan.training.weights import init_weights

ROWS, SEQ, VOCAB = 4, 16, 128
STEPS = int(os.environ.get("PIPELINE_CHECK_STEPS", "10"))
"""AdamW steps per scenario (``PIPELINE_CHECK_STEPS``, else 10)."""
MAX_NORM = 0.5  # below the norm of most steps, so clipping really scales
# fp32 sums in another order (microbatches, stages, shards): the same to ~1e-6.
FP32_TOL = {"rtol": 1e-4, "atol": 1e-5}
N_LAYERS = 4

CSV_SCHEDULE = (
    "0F0,0F1,0F2,0F3,2F0,2F1,2F2,2F3,2B0,2B1,2B2,2B3,0B0,0B1,0B2,0B3\n"
    "1F0,1F1,1F2,1F3,3F0,3F1,3F2,3F3,3B0,3B1,3B2,3B3,1B0,1B1,1B2,1B3\n"
)


def _config():
    config = model_config()
    config.n_layers = N_LAYERS
    return config


def _meta():
    with torch.device("meta"):
        return _config().build()


def scenarios(csv_path: str, comms_path: str = "comms.csv") -> dict[str, dict]:
    """Every scenario's parallelism settings, by name."""
    found: dict[str, dict] = {}
    for name in (
        "1F1B",
        "GPipe",
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV",
    ):
        found[name] = {"pipeline_parallel_schedule": name}
    found["csv"] = {
        "pipeline_parallel_schedule": "PipelineScheduleMulti",
        "pipeline_parallel_schedule_csv": csv_path,
    }
    # Interleaved1F1B's own schedule, written out with its communication (the CSV format with
    # SEND_F/RECV_F...): :func:`main` writes it from that scenario's schedule before this one.
    found["comms_csv"] = {
        "pipeline_parallel_schedule": "PipelineScheduleMulti",
        "pipeline_parallel_schedule_csv": comms_path,
    }
    found["1F1B_microbatch_2"] = {"pipeline_parallel_microbatch_size": 2}
    found["fsdp"] = {"pipeline_parallel_schedule": "Interleaved1F1B"}
    found["fsdp_1F1B"] = {"pipeline_parallel_schedule": "1F1B"}
    found["tp"] = {"pipeline_parallel_schedule": "1F1B", "tensor_parallel_degree": 2}
    found["tp_interleaved"] = {
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "tensor_parallel_degree": 2,
    }
    # 8 ranks: HSDP (2 replicas of 2 shards) x PP 2, and PP 2 x TP 2 x FSDP 2
    found["hsdp_pp"] = {
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "data_parallel_replicate_degree": 2,
        "data_parallel_shard_degree": 2,
    }
    found["pp_tp_fsdp"] = {
        "pipeline_parallel_schedule": "1F1B",
        "tensor_parallel_degree": 2,
        "data_parallel_shard_degree": 2,
    }
    # Context parallel inside every stage: the batch cut into each CP rank's head-tail chunks
    # before the microbatches, every stage's attention over the gathered keys.
    found["cp"] = {"pipeline_parallel_schedule": "1F1B", "context_parallel_degree": 2}
    found["cp_microbatch_2"] = {
        "pipeline_parallel_schedule": "GPipe",
        "context_parallel_degree": 2,
        "pipeline_parallel_microbatch_size": 2,
    }
    return found


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def gathered_weights(parts: list[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Every stage's full weights, from every rank."""
    mine = {
        clean_fqn(name): _full(param.detach()).clone()
        for part in parts
        for name, param in part.named_parameters()
    }
    everyone: list[dict] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    merged: dict[str, torch.Tensor] = {}
    for weights in everyone:
        merged.update(weights)
    return merged


RUNS: dict[str, tuple[list[float], list[float], object]] = {}
"""Each scenario run so far: its losses and grad norms (exactly) and its schedule."""


def run(name: str, settings: dict) -> str:
    """Train ``name``'s pipeline for ``STEPS`` steps against one process; its summary line.
    Its losses, grad norms and schedule are kept in :data:`RUNS`."""
    world = dist.get_world_size()
    parallelism = ParallelismConfig(pipeline_parallel_degree=2, **settings)
    dims = ParallelDims.from_config(parallelism, world_size=world)
    mesh = dims.build_mesh("cpu")
    training = TrainingConfig(seq_len=SEQ, local_batch_size=ROWS, mixed_precision_param="float32")
    spec = dataclasses.replace(model_registry("debugmodel"), model=_config())
    device = torch.device("cpu")
    parallelize = functools.partial(
        parallelize_model,
        spec=spec,
        parallel_dims=dims,
        world_mesh=mesh,
        training=training,
        parallelism=parallelism,
        activation_checkpoint=ActivationCheckpointConfig(mode="none"),
        compile=CompileConfig(),
    )
    initialize = functools.partial(
        init_weights, model_config=_config(), parallel_dims=dims, training=training, device=device
    )
    config = dataclasses.make_dataclass("C", ["parallelism", "training"])(parallelism, training)
    torch.manual_seed(0)
    step = build_pipeline_step(
        _meta(),
        config=config,
        parallel_dims=dims,
        world_mesh=mesh,
        device=device,
        loss_fn=cross_entropy_loss,
        accumulation_steps=1,
        parallelize=parallelize,
        init=initialize,
        amp=_null,
        loss_context=functools.partial(_loss_context, dims),
    )
    parts = step.pipeline.model_parts
    params = [p for part in parts for p in part.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    reference = build_on_meta().__class__(config=_config())
    # The loss is the mean over the data-parallel and context parallel ranks' tokens.
    dp_mesh = dims.mesh(mesh, "dp_cp")
    # What every block of this rank's stages sees: the sequence length of its input.
    seen: set[int] = set()
    for part in parts:
        for block in part.layers.values():
            block.register_forward_pre_hook(lambda module, args: seen.add(args[0].shape[1]))
    dp, dp_rank = dims.dp_degree, dims.dp_rank(mesh)
    pp_mesh = dims.mesh(mesh, "pp")
    worst = 0.0
    losses, norms = [], []
    generator = torch.Generator().manual_seed(7)
    for index in range(STEPS):
        tokens = torch.randint(0, VOCAB, (ROWS * dp, SEQ + 1), generator=generator)
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        mine = slice(dp_rank * ROWS, (dp_rank + 1) * ROWS)

        reference.load_state_dict(gathered_weights(parts), strict=True)
        reference.zero_grad()
        want_loss = cross_entropy_loss(reference(inputs), labels)
        want_loss.backward()
        want_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM)
        want_grads = {n: p.grad for n, p in reference.named_parameters()}

        optimizer.zero_grad()
        loss = step.forward_backward(inputs[mine].contiguous(), labels[mine].contiguous())
        norm = clip_grad_norm_(params, MAX_NORM, pp_mesh=pp_mesh)
        got_loss = dist_mean(loss, dp_mesh)
        losses.append(float(got_loss))
        norms.append(_full(norm).item())
        torch.testing.assert_close(
            torch.tensor(got_loss), want_loss.detach(), rtol=1e-5, atol=0, msg=f"{name} loss"
        )
        torch.testing.assert_close(
            _full(norm), want_norm, rtol=1e-5, atol=0, msg=f"{name} grad norm, step {index + 1}"
        )
        for part in parts:
            for param_name, param in part.named_parameters():
                key = clean_fqn(param_name)
                got = _full(param.grad)
                torch.testing.assert_close(
                    got, want_grads[key], **FP32_TOL, msg=f"{name} gradient of {key}"
                )
                worst = max(worst, (got - want_grads[key]).abs().max().item())
        optimizer.step()
    # Under context parallel every stage runs this rank's share of the sequence only.
    if dims.cp_enabled:
        assert seen == {SEQ // dims.cp}, f"{name}: blocks saw sequences of {sorted(seen)}"
    stages = step.pipeline.layout.stages
    RUNS[name] = (losses, norms, step.pipeline.schedule)
    _reread(step.pipeline)
    return f"OK {name}: {STEPS} steps, {stages} stages, worst gradient difference {worst:.2e}"


def _null():
    import contextlib

    return contextlib.nullcontext()


def _loss_context(dims: ParallelDims):
    from titan.training.setup import _loss_context as context

    return context(dims)


def _reread(pipeline) -> None:
    """torch's own schedule, written in each CSV format it has, is read back by titan's reader
    without a refusal (rank 0; a schedule torch runs is never refused)."""
    schedule = pipeline.schedule
    if dist.get_rank() != 0 or not hasattr(schedule, "pipeline_order_with_comms"):
        return
    folder = os.environ.get("PIPELINE_CHECK_DIR", ".")
    # a schedule loaded from a comms CSV has no compute-only form
    kinds = ("compute_only", "compute_comms") if schedule.pipeline_order else ("compute_comms",)
    for kind in kinds:
        path = os.path.join(folder, f"reread_{kind}.csv")
        schedule._dump_csv(path, format=kind)
        checked = read_schedule_csv(
            path, rank_stages=pipeline.layout.rank_stages, microbatches=pipeline.microbatches
        )
        assert checked.format == kind, (kind, checked.format)


def _write_comms_csv(path: str, *, source: str) -> None:
    """Write scenario ``source``'s schedule with its communication actions to ``path`` (rank 0),
    and check that the file is in that format."""
    if dist.get_rank() == 0:
        RUNS[source][2]._dump_csv(path, format="compute_comms")
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        assert "SEND_F" in text and "RECV_B" in text, text[:200]
    dist.barrier()


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    csv_path = os.path.join(os.environ.get("PIPELINE_CHECK_DIR", "."), "schedule.csv")
    if dist.get_rank() == 0:
        with open(csv_path, "w", encoding="utf-8") as handle:
            handle.write(CSV_SCHEDULE)
    dist.barrier()
    comms_path = os.path.join(os.environ.get("PIPELINE_CHECK_DIR", "."), "comms.csv")
    table = scenarios(csv_path, comms_path)
    for name in sys.argv[1:]:
        if name == "comms_csv":
            _write_comms_csv(comms_path, source="Interleaved1F1B")
        line = run(name, table[name])
        if name == "comms_csv":
            # the same actions in the same order: the same bits
            assert RUNS[name][:2] == RUNS["Interleaved1F1B"][:2], "comms CSV differs from named"
            line += ", losses and grad norms bitwise Interleaved1F1B's"
        if dist.get_rank() == 0:
            print(line, flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    run_and_leave(main)
