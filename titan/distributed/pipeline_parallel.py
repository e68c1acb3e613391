"""Pipeline parallel: a model cut into stages, each rank's stages built and parallelized, and
torch's schedule over them (``torch.distributed.pipelining``).

The split is :mod:`titan.schemas.pipeline_split`'s (torchtitan's rules, shared with
``titan-validate``): each stage is a copy of the meta model that keeps only its own modules.
``layers`` is a ``ModuleDict``, so a stage's blocks keep their names (``layers.<i>``) and every
stage's state dict holds the same keys the whole model's does: checkpoints load with any
pipeline degree, or none. The modules a stage lacks are ``None`` and the decoder's forward skips
them (the first stage embeds tokens, the last one applies the final norm and the output).

Each stage is parallelized on its own (TP, AC, compile, FSDP inside the stage, as torchtitan
does), then given real weights, then wrapped in a ``PipelineStage`` over the ``pp`` mesh.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from titan.distributed.pipeline_split import (
    SCHEDULE_KWARGS,
    PipelineLayout,
    pipeline_layout,
    schedule_class,
)
from titan.schemas import pipeline_batches as batches
from titan.schemas.pipeline_csv import read_schedule_csv

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import ParallelismConfig
    from titan.distributed.parallel_dims import ParallelDims

HEAD = "output"
"""The output projection's module name in titan's decoders."""

ENDS = ("tok_embeddings", "norm", HEAD)
"""The decoder's modules outside ``layers`` that belong to one stage each."""


def layout_of(parallelism: ParallelismConfig, *, n_layers: int) -> PipelineLayout:
    """The pipeline layout ``parallelism`` asks for on an ``n_layers`` model; refuses one that
    cannot be built with :class:`~titan.schemas.pipeline_split.PipelineSplitError`."""
    return pipeline_layout(
        n_layers=n_layers,
        pp=parallelism.pipeline_parallel_degree,
        schedule=parallelism.pipeline_parallel_schedule,
        layers_per_stage=parallelism.pipeline_parallel_layers_per_stage,
        first_stage_less_layers=parallelism.pipeline_parallel_first_stage_less_layers,
        last_stage_less_layers=parallelism.pipeline_parallel_last_stage_less_layers,
        module_fqns_per_model_part=parallelism.module_fqns_per_model_part,
        csv=bool(parallelism.pipeline_parallel_schedule_csv),
        head=HEAD,
    )


def microbatch_count(parallelism: ParallelismConfig, *, local_batch_size: int) -> int:
    """How many pipeline microbatches one local batch is cut into (what the schedule may be fed
    is the shared pipeline rule's: ``titan.schemas.pipeline_batches``)."""
    return batches.microbatch_count(
        local_batch_size=local_batch_size,
        microbatch_size=parallelism.pipeline_parallel_microbatch_size,
    )


def refuse_unpipelinable(
    parallelism: ParallelismConfig, *, model_config: Any, documents: bool = False
) -> None:
    """Raise ``ValueError`` (message; hint) for what titan-train's pipeline does not run
    although the layout is sound: a schedule CSV that is not a file, an output projection tied
    to the embeddings (two stages would hold one weight), or per-document masks (``documents``:
    a layer needs them) together with context parallel.

    Per-document masks run without context parallel (every stage builds them from the token
    ids, :mod:`titan.distributed.pipeline_masks`); with it, every stage would need the masks of
    its microbatch's rows over the whole sequence, which the context parallel cut of the batch
    does not split by microbatch. Hugging Face checkpoints run (every stage's tensors are
    gathered for the export and read by their own ranks on import,
    :mod:`titan.components.checkpoint.hf_stages`).

    The layout itself (the split, the microbatches each schedule can run, validation through
    the schedule) is the shared pipeline rule's (``titan.schemas.pipeline_rules``), which the
    run's checks apply first."""
    pp = parallelism.pipeline_parallel_degree
    csv = parallelism.pipeline_parallel_schedule_csv
    if csv and not os.path.isfile(csv):
        raise ValueError(
            f"parallelism.pipeline_parallel_schedule_csv {csv!r} is not a file; hint: give the "
            "path of the schedule's CSV file, or leave it empty to run the named schedule"
        )
    if getattr(model_config, "enable_weight_tying", False):
        raise ValueError(
            f"pipeline parallel (pipeline_parallel_degree = {pp}) cannot cut a model whose output "
            "projection is tied to its embeddings: the first and the last stage would each hold "
            "the one weight; hint: set enable_weight_tying = False in the model config, or "
            "pipeline_parallel_degree = 1"
        )
    cp = parallelism.context_parallel_degree
    if documents and cp > 1:
        raise ValueError(
            f"pipeline parallel (pipeline_parallel_degree = {pp}) together with context parallel "
            f"(context_parallel_degree = {cp}) does not run block_causal attention yet: its "
            "per-document masks are not cut into the pipeline's microbatches; hint: set the "
            "attention's attn_mask_type to 'causal', or pipeline_parallel_degree or "
            "context_parallel_degree to 1"
        )


def split_model(model: nn.Module, modules: list[str]) -> nn.Module:
    """A copy of ``model`` (on the meta device) that holds only ``modules`` (``tok_embeddings``,
    ``layers.<i>``, ``norm``, ``output``); the decoder's other ends become ``None``."""
    keep = set(modules)
    stage = copy.deepcopy(model)
    for name in ENDS:
        if name not in keep:
            setattr(stage, name, None)
    for name in list(stage.layers.keys()):
        if f"layers.{name}" not in keep:
            del stage.layers[name]
    return stage


@dataclasses.dataclass(kw_only=True)
class Pipeline:
    """This rank's stages of the model and the schedule that runs them."""

    schedule: Any
    """torch's schedule over this rank's stages (``step``, ``eval``)."""
    stages: list[Any]
    """This rank's ``PipelineStage`` objects, in stage order."""
    model_parts: list[nn.Module]
    """The stages' modules, as the optimizers and checkpoints see them."""
    layout: PipelineLayout
    """Every stage's modules and every pipeline rank's stages."""
    pp_mesh: DeviceMesh
    """The pipeline ranks this rank exchanges activations with."""
    microbatches: int
    """Microbatches per local batch."""
    input_batch: bool = False
    """Whether the schedule is also handed the token ids (``input_batch``), from which every
    stage builds its per-document masks (:mod:`titan.distributed.pipeline_masks`)."""

    @property
    def has_first_stage(self) -> bool:
        """Whether this rank feeds the token ids in (it holds stage 0)."""
        return any(stage.is_first for stage in self.stages)

    @property
    def has_last_stage(self) -> bool:
        """Whether this rank computes the loss (it holds the last stage)."""
        return any(stage.is_last for stage in self.stages)


def build_pipeline(
    model: nn.Module,
    *,
    parallel_dims: ParallelDims,
    world_mesh: DeviceMesh,
    parallelism: ParallelismConfig,
    local_batch_size: int,
    device: torch.device,
    loss_fn: Callable[..., torch.Tensor],
    parallelize: Callable[[nn.Module], nn.Module],
    init: Callable[[nn.Module], None],
    eos_id: int | None = None,
) -> Pipeline:
    """This rank's stages of the meta ``model``: each split off, ``parallelize``d, given real
    weights by ``init``, wrapped in a ``PipelineStage``; and the schedule over them, which calls
    ``loss_fn(logits, labels, **loss_kwargs)`` on the last stage's microbatches. A model with
    per-document masks has each stage build them from the token ids, ended at ``eos_id``."""
    from torch.distributed.pipelining import PipelineStage

    from titan.distributed import pipeline_waits
    from titan.distributed.pipeline_masks import build_masks_from_input_batch, needs_input_batch

    pipeline_waits.install()

    layout = layout_of(parallelism, n_layers=len(model.layers))
    pp_mesh = parallel_dims.mesh(world_mesh, "pp")
    assert pp_mesh is not None
    pp_rank = pp_mesh.get_local_rank()
    group = pp_mesh.get_group()
    stages, parts = [], []
    # Every stage draws its weights from the same random state, the one the whole model would
    # start from, so a rank's second stage is not initialised from where its first one left off.
    rng = _random_state(device)
    input_batch = needs_input_batch(model)
    for index in layout.rank_stages[pp_rank]:
        part = split_model(model, layout.modules[index])
        part = parallelize(part)
        _set_random_state(device, rng)
        init(part)
        part.train()
        if input_batch:
            build_masks_from_input_batch(part, eos_id=eos_id)
        parts.append(part)
        stages.append(PipelineStage(part, index, layout.stages, device, group=group))
    microbatches = microbatch_count(parallelism, local_batch_size=local_batch_size)
    schedule = _build_schedule(
        parallelism, stages=stages, layout=layout, microbatches=microbatches, loss_fn=loss_fn
    )
    return Pipeline(
        schedule=schedule,
        stages=stages,
        model_parts=parts,
        layout=layout,
        pp_mesh=pp_mesh,
        microbatches=microbatches,
        input_batch=input_batch,
    )


def _random_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CPU generator's state and ``device``'s (None on CPU)."""
    accelerator = None
    if device.type != "cpu":
        accelerator = torch.get_device_module(device.type).get_rng_state(device)
    return torch.get_rng_state(), accelerator


def _set_random_state(
    device: torch.device, state: tuple[torch.Tensor, torch.Tensor | None]
) -> None:
    """Restore what :func:`_random_state` returned."""
    cpu, accelerator = state
    torch.set_rng_state(cpu)
    if accelerator is not None:
        torch.get_device_module(device.type).set_rng_state(accelerator, device)


def _build_schedule(
    parallelism: ParallelismConfig,
    *,
    stages: list[Any],
    layout: PipelineLayout,
    microbatches: int,
    loss_fn: Callable[..., torch.Tensor],
) -> Any:
    """torch's schedule of ``parallelism``'s name (or the CSV runtime) over ``stages``."""
    csv = parallelism.pipeline_parallel_schedule_csv
    cls = schedule_class(parallelism.pipeline_parallel_schedule, csv=bool(csv))
    single = layout.schedule.kind == "single" and not csv
    schedule = cls(
        stages[0] if single else stages,
        n_microbatches=microbatches,
        loss_fn=loss_fn,
        **SCHEDULE_KWARGS,
    )
    if csv:
        # the shared reader refuses what torch would raise on or hang over, and says which of
        # torch's two formats the file is in (a file with communication actions runs as written)
        checked = read_schedule_csv(csv, rank_stages=layout.rank_stages, microbatches=microbatches)
        try:
            schedule._load_csv(csv, format=checked.format)
        except (OSError, ValueError, AssertionError, RuntimeError, IndexError, KeyError) as error:
            raise ValueError(
                f"parallelism.pipeline_parallel_schedule_csv {csv!r} is not a schedule torch can "
                f"run on these {layout.stages} stages: {error}; hint: write one row per pipeline "
                "rank of actions such as 0F0 (stage 0, forward, microbatch 0) and 0B0"
            ) from None
    return schedule


__all__ = [
    "ENDS",
    "HEAD",
    "Pipeline",
    "build_pipeline",
    "layout_of",
    "microbatch_count",
    "refuse_unpipelinable",
    "split_model",
]
