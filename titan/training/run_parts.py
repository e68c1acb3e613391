"""The built pieces of one training run (:class:`RunParts`), and what the training loop does with
them between steps: move a batch to the device, average over the data-parallel ranks, clip the
gradients, switch to the training timeout after the first step, and release everything at the end.

``titan.training.setup.build_run`` makes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from titan.distributed.grad_norm import clip_grad_norm_
from titan.distributed.process_group import destroy_distributed, set_train_timeout
from titan.distributed.reductions import dist_mean
from titan.training.dump_lock import release_all

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.components.checkpoint import CheckpointManager
    from titan.components.dataloader import BaseDataLoader
    from titan.components.lr_scheduler import LRSchedulersContainer
    from titan.components.metrics import MetricsProcessor
    from titan.components.optimizer import OptimizersContainer
    from titan.components.validate import Validator
    from titan.config.configs import CommConfig
    from titan.distributed.parallel_dims import ParallelDims
    from titan.protocols.model_converter import ModelConvertersContainer
    from titan.training.state import GarbageCollection, TrainState


@dataclasses.dataclass(kw_only=True)
class RunParts:
    """The built pieces of one run, as the training loop uses them."""

    log: logging.Logger
    """The trainer's logger."""
    device: torch.device
    """This process's training device."""
    parallel_dims: ParallelDims
    """The run's parallel degrees."""
    world_mesh: DeviceMesh | None
    """The device mesh over every rank; None for one process."""
    model: torch.nn.Module
    """The parallelized model with its initial weights."""
    model_parts: list[torch.nn.Module]
    """The model's parts (one without pipeline parallel), as the optimizers and checkpoints see
    them."""
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``loss_fn(logits, labels)``: the scalar training loss (compiled when asked)."""
    attention_masks: Callable[[torch.Tensor], Any]
    """``attention_masks(inputs)``: the batch's attention masks, to pass to the model's forward
    (per-document ones end documents at the tokenizer's EOS id)."""
    dataloader: BaseDataLoader
    """This data-parallel rank's batches."""
    optimizers: OptimizersContainer
    """One optimizer per model part (stepped in backward for the in-backward container)."""
    lr_schedulers: LRSchedulersContainer
    """The learning-rate schedule of every optimizer."""
    checkpointer: CheckpointManager
    """Saving, loading and exporting checkpoints."""
    metrics: MetricsProcessor
    """Logging of losses, throughput and memory to the configured sinks."""
    validator: Validator | None
    """The validation loop; None when validation is off."""
    converters: ModelConvertersContainer
    """The model converters (float8, MX) and their post-optimizer hooks."""
    train_state: TrainState
    """Step and token counters, saved with checkpoints."""
    gc: GarbageCollection
    """Python garbage collection at the configured interval."""
    accumulation_steps: int
    """Micro-batches per optimizer step."""
    clip_gradients: bool
    """Whether the loop clips the gradient norm (not when optimizers step in backward)."""
    max_norm: float
    """The gradient-norm clipping threshold."""
    amp: Callable[[], contextlib.AbstractContextManager]
    """The forward pass's autocast context."""
    loss_context: Callable[[], contextlib.AbstractContextManager]
    """The loss's context (loss parallel under TP)."""
    profiler: Callable[[], contextlib.AbstractContextManager]
    """The profiler context of the training loop."""
    summary: str
    """One line describing the run (model, parameters, degrees, device, batches)."""
    comm: CommConfig
    """Collective timeouts (the training one applies after the first step)."""
    locks: list[Any] = dataclasses.field(default_factory=list)
    """The output folders' locks (rank 0), released when the run closes."""
    pipeline_step: Any = None
    """Under pipeline parallel, the ``PipelineStep`` that runs each micro-batch through the
    schedule (``titan.training.pipeline_step``); None without it."""

    @property
    def dp_degree(self) -> int:
        """Number of data-parallel ranks."""
        return self.parallel_dims.dp_degree

    def dp_mean(self, value: torch.Tensor) -> float:
        """``value`` averaged over the data-parallel ranks (and the context parallel ones, each
        of which holds a share of the batch's tokens), as a Python float."""
        mesh = self.parallel_dims.mesh(self.world_mesh, "dp_cp") if self.world_mesh else None
        return dist_mean(value, mesh)

    def to_device(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[Any, Any]:
        """A (inputs, labels) batch from the loader (CPU tensors) on the training device."""
        inputs, labels = batch
        return (
            inputs.to(self.device, non_blocking=True),
            labels.to(self.device, non_blocking=True),
        )

    @functools.cached_property
    def parameters(self) -> list[torch.nn.Parameter]:
        """Every parameter of every model part (listed once: the set never changes)."""
        return [p for part in self.model_parts for p in part.parameters()]

    def clip_grad_norm(self) -> torch.Tensor:
        """Clip every parameter's gradient to ``max_norm`` together; returns the total norm."""
        pp_mesh = self.parallel_dims.mesh(self.world_mesh, "pp") if self.world_mesh else None
        return clip_grad_norm_(self.parameters, self.max_norm, pp_mesh=pp_mesh)

    def after_first_step(self) -> None:
        """The first step is done: collectives may now use the (shorter) training timeout."""
        if self.world_mesh is not None:
            set_train_timeout(self.comm, world_mesh=self.world_mesh)

    def close(self, *, finished: bool) -> None:
        """Release everything; ``finished`` says whether every rank got to the end of the run
        (otherwise nothing here waits for the other ranks, which may have failed)."""
        try:
            self.checkpointer.close(wait_for_peers=finished)
            self.metrics.close()
            self.gc.close()
            destroy_distributed(wait_for_peers=finished)
        finally:
            # Last: until every pending save is published, another run must not start here.
            release_all(self.locks)
