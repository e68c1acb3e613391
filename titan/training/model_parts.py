"""The model's parts with real weights: the whole model parallelized, or under pipeline
parallel this rank's stages and the schedule that runs them."""

from __future__ import annotations

import functools
from typing import Any

import torch

from titan.distributed.parallelize import parallelize_model
from titan.training.weights import init_weights


def build_model_parts(
    model: torch.nn.Module,
    *,
    config: Any,
    spec: Any,
    model_config: Any,
    parallel_dims: Any,
    world_mesh: Any,
    device: torch.device,
    float8_enabled: bool,
    loss_fn: Any,
    accumulation_steps: int,
    amp: Any,
    loss_context: Any,
    eos_id: int | None = None,
) -> tuple[list[torch.nn.Module], Any]:
    """``(model parts, pipeline step)`` of the meta ``model``: ``[model]`` parallelized with
    its weights and no pipeline step, or under pipeline parallel this rank's stages (each
    parallelized and given its weights) and the ``PipelineStep`` that runs the schedule
    (``eos_id`` ends the documents the stages build per-document masks from)."""
    parallelize = functools.partial(
        parallelize_model,
        spec=spec,
        parallel_dims=parallel_dims,
        world_mesh=world_mesh,
        training=config.training,
        parallelism=config.parallelism,
        activation_checkpoint=config.activation_checkpoint,
        compile=config.compile,
        float8_enabled=float8_enabled,
        dump_folder=config.dump_folder,
    )
    initialize = functools.partial(
        init_weights,
        model_config=model_config,
        parallel_dims=parallel_dims,
        training=config.training,
        device=device,
    )
    if not parallel_dims.pp_enabled:
        model = parallelize(model)
        initialize(model)
        model.train()
        return [model], None
    from titan.training.pipeline_step import build_pipeline_step

    step = build_pipeline_step(
        model,
        config=config,
        parallel_dims=parallel_dims,
        world_mesh=world_mesh,
        device=device,
        loss_fn=loss_fn,
        accumulation_steps=accumulation_steps,
        parallelize=parallelize,
        init=initialize,
        amp=amp,
        loss_context=loss_context,
        eos_id=eos_id,
    )
    return step.pipeline.model_parts, step


__all__ = ["build_model_parts"]
