"""Build everything a Flux training run needs, in the order of titan's other families.

The same checks first (``titan.training.run_checks``, shared with ``titan-train --preflight``),
then the output folders' lock, process group and mesh, seeds, data, the transformer on the meta
device, its activation checkpointing and FSDP/HSDP (``parallelize_flux``), real weights, the
frozen autoencoder and text encoders, loss, optimizer, LR schedule, checkpointing, metrics and
validation. The pieces come back as :class:`FluxRunParts`, the generic ``RunParts`` plus the
frozen parts and the run's seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any

import torch

from titan.distributed.amp import DTYPE_OF_NAME
from titan.models.flux.conditioning import FrozenParts, RankRows, build_frozen_parts
from titan.training.setup import RunParts, degrees_in_words

log = logging.getLogger("titan")

FULL_ATTENTION_NOTE = (
    "flux attends fully over the image and text tokens, as FLUX.1 defines it; torchtitan "
    "v0.2.2's double- and single-stream blocks attended causally (its attention wrapper "
    "defaulted to causal), so a run migrated from v0.2.2 trains a different model from the "
    "first step and its losses do not match v0.2.2's"
)
"""Said once at the start of every flux run: a difference a migrating user must know."""


@dataclasses.dataclass(kw_only=True)
class FluxRunParts(RunParts):
    """``RunParts`` of a Flux run: also the frozen parts, the seed and this rank's rows."""

    frozen: FrozenParts | None = None
    """The autoencoder and text encoders."""
    seed: int = 0
    """The run's seed (every rank's): keys every step's random draws."""
    rows: RankRows | None = None
    """This data-parallel rank's rows of each global batch."""

    def to_device(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """A (token dict, images) batch on the training device (prompts stay strings)."""
        inputs, images = batch
        moved = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        return moved, images.to(self.device)


def encoder_dtype(parallel_dims: Any, training: Any) -> torch.dtype:
    """The frozen parts' dtype: FSDP's parameter dtype when sharded, else float32 (v0.2.2)."""
    if parallel_dims.fsdp_enabled:
        return DTYPE_OF_NAME[training.mixed_precision_param]
    return torch.float32


def check_image_size(img_size: int) -> None:
    """``ValueError`` unless ``img_size`` makes latents of whole 2x2 patches (a multiple of 16)."""
    if img_size % 16:
        raise ValueError(
            f"dataloader.img_size (legacy TOML: training.img_size) is {img_size}; Flux packs "
            "8x-downscaled latents in 2x2 patches, so it must be a multiple of 16"
        )


def build_flux_run(config: Any, *, findings_reported: bool = False, **runtime: Any) -> FluxRunParts:
    """Every part of the Flux run ``config`` describes, on this process's ranks and device."""
    from titan.training.setup import build_checked

    return build_checked(config, _build, findings_reported=findings_reported, **runtime)


def _build(config: Any, *, checked: Any, locks: list[Any], refusal: BaseException | None):
    """Everything after the checks and the lock; ``refusal`` is rank 0's failure to take it."""
    from titan.distributed.config_agreement import check_same_config
    from titan.distributed.determinism import set_determinism
    from titan.distributed.process_group import init_distributed
    from titan.models.flux.parallelize import parallelize_flux
    from titan.tools.profiling import profiler_context
    from titan.training import setup
    from titan.training.dump_lock import agree_on_locks
    from titan.training.state import GarbageCollection, TrainState
    from titan.training.weights import DTYPES, default_dtype

    spec, parallel_dims, training = checked.spec, checked.parallel_dims, config.training
    check_image_size(config.dataloader.img_size)
    placement = init_distributed(config.comm, dump_folder=config.dump_folder)
    check_same_config(config)
    agree_on_locks(refusal)
    device, rank = placement.device, placement.rank
    world_mesh = parallel_dims.build_mesh(device.type)
    seed = set_determinism(world_mesh, device=device, debug=config.debug)
    if seed is None:
        seed = torch.initial_seed() & (2**63 - 1)
        torch.manual_seed(seed)
    if config.debug.seed is None:
        log.info("debug.seed is unset; this run's seed is %d (set it to repeat the run)", seed)
    if rank == 0:
        log.warning("%s", FULL_ATTENTION_NOTE)
    setup._save_config(config, rank=rank)

    dp_degree, dp_rank = parallel_dims.dp_degree, parallel_dims.dp_rank(world_mesh)
    accumulation_steps = checked.accumulation_steps
    # Each sample's caption dropout is drawn from (seed, pass, sample index): the ranks read
    # different samples, so they drop different captions, whatever the layout.
    dataloader = config.dataloader.build(
        dp_world_size=dp_degree,
        dp_rank=dp_rank,
        local_batch_size=training.local_batch_size,
        hf_assets_path=checked.hf_assets_path,
        seed=seed,
        encoder=config.encoder,
    )

    model_config = checked.model_config
    with torch.device("meta"), default_dtype(DTYPES[training.dtype]):
        model = model_config.build()
    converters = config.model_converters.build(
        parallel_dims=parallel_dims, model_compile_enabled=False
    )
    dp_mesh = world_mesh[parallel_dims.fsdp_mesh_dim_names] if parallel_dims.fsdp_enabled else None
    parallelize_flux(
        model,
        activation_checkpoint=config.activation_checkpoint,
        dp_mesh=dp_mesh,
        param_dtype=DTYPE_OF_NAME[training.mixed_precision_param],
        reduce_dtype=DTYPE_OF_NAME[training.mixed_precision_reduce],
        cpu_offload=training.enable_cpu_offload,
        reshard_after_forward=config.parallelism.fsdp_reshard_after_forward,
    )
    _init_weights(model, model_config=model_config, sharded=dp_mesh is not None, device=device,
                  dtype=DTYPES[training.dtype])  # fmt: skip
    model.train()
    model_parts = [model]

    optimizers = config.optimizer.build(
        model_parts=model_parts, gradient_accumulation_steps=accumulation_steps
    )
    lr_schedulers = config.lr_scheduler.build(optimizers=optimizers, training_steps=training.steps)
    in_backward = type(optimizers).__name__ == "OptimizersInBackwardContainer"
    train_state = TrainState()
    sd_adapter = checked.sd_adapter
    checkpointer = config.checkpoint.build(
        dump_folder=config.dump_folder,
        states={
            "model": setup._model_state(model_parts),
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
        dump_folder=config.dump_folder,
        rank=rank,
        is_logging_rank=rank == 0,
        device_type=device.type,
        num_flops_per_token=None,
        peak_flops=None,
        total_steps=training.steps,
        non_data_parallel_size=parallel_dims.non_data_parallel_size,
    )
    frozen = build_frozen_parts(
        encoder=config.encoder,
        model_config=model_config,
        tokenizers=dataloader.tokenizers,
        device=device,
        dtype=encoder_dtype(parallel_dims, training),
    )
    rows = RankRows(dp_rank=dp_rank, dp_degree=dp_degree)
    loss_fn = spec.resolve("build_loss_fn")()
    amp = lambda: setup._amp(parallel_dims, training, device)  # noqa: E731
    validator = None
    if config.validator.enable:
        validator = config.validator.build(
            dp_world_size=dp_degree,
            dp_rank=dp_rank,
            local_batch_size=config.validator.local_batch_size or training.local_batch_size,
            hf_assets_path=checked.hf_assets_path,
            seed=seed,
            loss_fn=loss_fn,
            metrics=metrics,
            device=device,
            dp_mesh=parallel_dims.mesh(world_mesh, "dp_cp") if world_mesh is not None else None,
            amp=amp,
            frozen=frozen,
            rows=rows,
            trainer_config=config,
            encoder=config.encoder,
        )
    images = f"{training.local_batch_size} image(s) of {config.dataloader.img_size}px"
    summary = (
        f"{spec.name} {spec.flavor}, {checked.parameters:,} parameters, "
        f"world size {parallel_dims.world_size} ({degrees_in_words(parallel_dims)}), "
        f"device {device.type}, {accumulation_steps} micro-batch(es) of {images}"
    )
    return FluxRunParts(
        log=log,
        device=device,
        parallel_dims=parallel_dims,
        world_mesh=world_mesh,
        model=model,
        model_parts=model_parts,
        loss_fn=loss_fn,
        attention_masks=lambda _: None,
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
        amp=amp,
        loss_context=contextlib.nullcontext,
        profiler=lambda: profiler_context(
            config.profiling, dump_folder=config.dump_folder, rank=rank
        ),
        summary=summary,
        comm=config.comm,
        locks=locks,
        frozen=frozen,
        seed=seed,
        rows=rows,
    )


def _init_weights(
    model: torch.nn.Module, *, model_config: Any, sharded: bool, device: torch.device, dtype: Any
) -> None:
    """Real weights from the shared seed, the same for every layout: on CPU torch has no
    per-shard RNG, so a sharded model loads its shards from the full model initialised once."""
    from titan.training.weights import default_dtype

    model.to_empty(device=device)
    with torch.no_grad():
        if not (sharded and device.type == "cpu"):
            model.init_weights()
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        with torch.device("meta"), default_dtype(dtype):
            full = model_config.build()
        full.to_empty(device="cpu")
        full.init_weights()
        set_model_state_dict(
            model, full.state_dict(), options=StateDictOptions(full_state_dict=True)
        )


__all__ = [
    "FULL_ATTENTION_NOTE",
    "FluxRunParts",
    "build_flux_run",
    "check_image_size",
    "encoder_dtype",
]
