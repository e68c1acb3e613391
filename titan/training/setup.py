"""Build everything a training run needs from its ``Trainer.Config``, in torchtitan's order.

Process group and device mesh first (so every later piece knows its ranks), then seeds, data,
the model on the meta device, converters, parallelisation, real weights, loss, optimizer, LR
schedule, checkpointing, metrics and validation. Each component receives only its own config
section plus the runtime objects it needs. What comes out is a ``RunParts``
(``titan.training.run_parts``), which the training loop drives.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from titan.components.run_files import replace_run_file
from titan.config.serialize import to_json
from titan.distributed.amp import amp_context
from titan.distributed.config_agreement import check_same_config
from titan.distributed.cp_batch import context_parallel_parts
from titan.distributed.determinism import set_determinism
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.process_group import init_distributed
from titan.tools.profiling import profiler_context
from titan.training.dump_lock import (
    agree_on_locks,
    lock_folders,
    output_folders,
    release_all,
    saved_config_file,
)
from titan.training.folder_checks import check_creatable_folders, check_folders
from titan.training.model_parts import build_model_parts
from titan.training.run_checks import CheckedRun, check_config
from titan.training.run_parts import RunParts
from titan.training.state import GarbageCollection, TrainState
from titan.training.weights import DTYPES, default_dtype

log = logging.getLogger("titan")


def build_run(config: Any, *, findings_reported: bool = False, **runtime: Any) -> RunParts:
    """Every part of the run ``config`` describes, on this process's ranks and device.
    ``findings_reported``: ``titan-train`` has printed the config's warnings already; a run
    built from Python says them through its logger."""
    return build_checked(config, _build, findings_reported=findings_reported, **runtime)


def build_checked(
    config: Any, build: Callable[..., Any], *, findings_reported: bool = False, **runtime: Any
) -> Any:
    """``build(config, checked=, locks=, refusal=)`` once ``config`` passed every check the run
    makes and rank 0 holds its output folders (or knows why it cannot): the start every trainer
    shares, whatever parts its ``build`` makes. The locks are released if ``build`` fails."""
    if runtime:
        raise TypeError(f"unexpected runtime arguments: {', '.join(sorted(runtime))}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    # Everything the run would refuse is refused here, before any lock or output folder, by the
    # same checks as titan-train --preflight, in the same order.
    checked = check_config(
        config, world_size=world_size, warn=False, warn_findings=not findings_reported
    )
    # Rank 0 locks the output folders before anything is written; the other ranks learn its
    # verdict once the process group exists, so a refused run ends on every rank at once.
    locks: list[Any] = []
    refusal: BaseException | None = None
    if int(os.environ.get("RANK", "0")) == 0:
        try:
            check_creatable_folders(config)
            locks = lock_folders(output_folders(config))
            check_folders(config, sd_adapter=checked.sd_adapter, probe_locks=False)
        except (ValueError, OSError) as error:
            refusal = error
    try:
        return build(config, checked=checked, locks=locks, refusal=refusal)
    except BaseException:
        release_all(locks)
        raise


def _build(
    config: Any, *, checked: CheckedRun, locks: list[Any], refusal: BaseException | None
) -> RunParts:
    """Everything after the checks and the lock; ``refusal`` is rank 0's failure to take it."""
    spec, parallel_dims = checked.spec, checked.parallel_dims
    build_loss = spec.resolve("build_loss_fn")
    training = config.training
    dump_folder = config.dump_folder
    world_size = parallel_dims.world_size
    placement = init_distributed(config.comm, dump_folder=dump_folder)
    check_same_config(config)  # before any collective that a differing config would mismatch
    agree_on_locks(refusal)
    device, rank = placement.device, placement.rank
    world_mesh = parallel_dims.build_mesh(device.type)
    seed = set_determinism(world_mesh, device=device, debug=config.debug)
    if seed is None:
        # torch seeds itself randomly at start-up; name that seed so the run can be repeated.
        # torch draws 64 unsigned bits, but debug.seed is a signed 64-bit setting like every
        # integer a config holds: keep the low 63 bits, so the seed named can be passed back.
        seed = torch.initial_seed() & (2**63 - 1)
        torch.manual_seed(seed)
    if config.debug.seed is None:
        log.info("debug.seed is unset; this run's seed is %d (set it to repeat the run)", seed)
    _save_config(config, rank=rank)

    dp_degree, dp_rank = parallel_dims.dp_degree, parallel_dims.dp_rank(world_mesh)
    accumulation_steps = checked.accumulation_steps
    tokenizer = checked.tokenizer
    dataloader = checked.dataloader  # built for data-parallel rank 0 by the checks
    if dp_rank != 0:
        dataloader = config.dataloader.build(
            dp_world_size=dp_degree,
            dp_rank=dp_rank,
            tokenizer=tokenizer,
            seq_len=training.seq_len,
            local_batch_size=training.local_batch_size,
        )

    # A fresh meta model: the checks' one carries their throw-away optimizer's hooks.
    model_config, eos_id = checked.model_config, checked.eos_id
    with torch.device("meta"), default_dtype(DTYPES[training.dtype]):
        model = model_config.build()
    compile_model = config.compile.enable and "model" in config.compile.components
    converters = config.model_converters.build(
        parallel_dims=parallel_dims, model_compile_enabled=compile_model
    )
    converters.convert(model)
    loss_fn = build_loss()
    if config.compile.enable and "loss" in config.compile.components:
        loss_fn = torch.compile(loss_fn, backend=config.compile.backend)
    model_parts, pipeline_step = build_model_parts(
        model,
        config=config,
        spec=spec,
        model_config=model_config,
        parallel_dims=parallel_dims,
        world_mesh=world_mesh,
        device=device,
        float8_enabled=converters.float8_tensorwise_linears(),
        loss_fn=loss_fn,
        accumulation_steps=accumulation_steps,
        amp=lambda: _amp(parallel_dims, training, device),
        loss_context=lambda: _loss_context(parallel_dims),
        eos_id=eos_id,
    )
    model = model_parts[0]

    optimizers = config.optimizer.build(
        model_parts=model_parts, gradient_accumulation_steps=accumulation_steps
    )
    optimizers.register_step_post_hook(lambda *_: converters.post_optimizer_hook(model_parts))
    if spec.post_optimizer_build_fn is not None:
        spec.resolve("post_optimizer_build_fn")(
            optimizers, model_parts=model_parts, parallel_dims=parallel_dims, world_mesh=world_mesh
        )
    lr_schedulers = config.lr_scheduler.build(optimizers=optimizers, training_steps=training.steps)
    in_backward = type(optimizers).__name__ == "OptimizersInBackwardContainer"

    train_state = TrainState()
    sd_adapter = checked.sd_adapter
    checkpointer = config.checkpoint.build(
        dump_folder=dump_folder,
        states={
            "model": _model_state(model_parts),
            "optimizer": optimizers,
            "lr_scheduler": lr_schedulers,
            "dataloader": dataloader,
            "train_state": train_state,
        },
        model_parts=model_parts,
        sd_adapter=sd_adapter,
        export_config_json=sd_adapter.config_json() if sd_adapter is not None else None,
    )

    metrics = config.metrics.build(
        dump_folder=dump_folder,
        rank=rank,
        is_logging_rank=rank == 0,
        device_type=device.type,
        num_flops_per_token=model_config.flops_per_token(training.seq_len),
        peak_flops=None,
        total_steps=training.steps,
        non_data_parallel_size=parallel_dims.non_data_parallel_size,
    )
    # Built once per batch from its tokens, as torchtitan's trainer does for flex/varlen.
    attention_masks = functools.partial(model.attention_masks, eos_id=eos_id)
    if parallel_dims.cp_enabled:
        loss_fn, attention_masks = context_parallel_parts(
            loss_fn=loss_fn,
            model=model,
            eos_id=eos_id,
            parallel_dims=parallel_dims,
            world_mesh=world_mesh,
        )
    validator = None
    if config.validator.enable:
        validator = config.validator.build(
            dp_world_size=dp_degree,
            dp_rank=dp_rank,
            tokenizer=tokenizer,
            seq_len=config.validator.seq_len or training.seq_len,
            local_batch_size=config.validator.local_batch_size or training.local_batch_size,
            loss_fn=loss_fn,
            attention_masks=attention_masks,
            metrics=metrics,
            device=device,
            dp_mesh=parallel_dims.mesh(world_mesh, "dp_cp") if world_mesh is not None else None,
            amp=lambda: _amp(parallel_dims, training, device),
            loss_context=lambda: _loss_context(parallel_dims),
        )

    if validator is not None and pipeline_step is not None:
        validator.forward_loss = pipeline_step.evaluate  # the stages run in the schedule
    summary = (
        f"{spec.name} {spec.flavor}, {checked.parameters:,} parameters, "
        f"world size {world_size} ({degrees_in_words(parallel_dims)}), device {device.type}, "
        f"{accumulation_steps} micro-batch(es) of {training.local_batch_size}×{training.seq_len}"
    )
    return RunParts(
        log=log,
        device=device,
        parallel_dims=parallel_dims,
        world_mesh=world_mesh,
        model=model,
        model_parts=model_parts,
        loss_fn=loss_fn,
        attention_masks=attention_masks,
        dataloader=dataloader,
        optimizers=optimizers,
        lr_schedulers=lr_schedulers,
        checkpointer=checkpointer,
        metrics=metrics,
        validator=validator,
        converters=converters,
        train_state=train_state,
        gc=GarbageCollection(gc_freq=training.gc_freq, debug=training.gc_debug),
        accumulation_steps=accumulation_steps,
        clip_gradients=not in_backward,
        max_norm=float(training.max_norm),
        amp=lambda: _amp(parallel_dims, training, device),
        loss_context=lambda: _loss_context(parallel_dims),
        profiler=lambda: profiler_context(config.profiling, dump_folder=dump_folder, rank=rank),
        summary=summary,
        comm=config.comm,
        locks=locks,
        pipeline_step=pipeline_step,
    )


def _model_state(model_parts: list[torch.nn.Module]) -> Any:
    """The model's checkpoint state (all parts as one state dict)."""
    from titan.components.checkpoint.state import ModelState

    return ModelState(model_parts)


def _amp(parallel_dims: ParallelDims, training: Any, device: torch.device):
    """The forward pass's autocast context (a no-op when nothing needs it)."""
    return amp_context(parallel_dims, training=training, device_type=device.type)


def _loss_context(parallel_dims: ParallelDims):
    """Loss parallel under TP (the logits are vocabulary-sharded); otherwise a no-op."""
    if parallel_dims.loss_parallel_enabled:
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()
    return contextlib.nullcontext()


def degrees_in_words(parallel_dims: ParallelDims) -> str:
    """The parallelisms in use, in words ("FSDP 4, TP 2"; "one process" when none)."""
    names = {
        "pp": "PP",
        "dp_replicate": "DDP",
        "dp_shard": "FSDP",
        "cp": "CP",
        "tp": "TP",
        "ep": "EP",
    }
    used = [f"{label} {getattr(parallel_dims, name)}" for name, label in names.items()]
    if parallel_dims.etp_enabled:
        used.append(f"ETP {parallel_dims.etp}")
    shown = [text for text in used if not text.endswith(" 1")]
    return ", ".join(shown) or "one process"


def _save_config(config: Any, *, rank: int) -> None:
    """``debug.print_config`` and ``debug.save_config_file``, on rank 0."""
    if rank != 0:
        return
    if config.debug.print_config:
        log.info("config:\n%s", json.dumps(json.loads(to_json(config)), indent=2))
    if config.debug.save_config_file:
        # titan-train refused a path naming its own input before the run began; the write is
        # atomic (a crash mid-write leaves no half-written file) and never through a link.
        path = Path(saved_config_file(config))
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_run_file(str(path), data=(to_json(config) + "\n").encode("utf-8"))
