"""One micro-batch's forward and backward through the pipeline schedule, with the loss and the
gradients of the same run without pipeline parallel.

Without pipeline parallel a micro-batch's loss is the mean over its tokens, divided by the
accumulation steps, and backward runs on that. torch's schedule cuts the micro-batch into
pipeline microbatches and runs backward on each one's loss inside ``step``, and it is built with
``scale_grads=False`` (it does not divide gradients itself). So each microbatch's loss is its
mean weighted by its share of the micro-batch's tokens: the losses add up to the micro-batch's
mean, and their gradients to its gradients, before any backward runs. (torchtitan v0.2.2 ran
backward on per-microbatch sums and divided only the reported loss afterwards, so its pipeline
gradients, and grad norms, were not those of the same run without it.)

Under context parallel each rank feeds the schedule its share of the micro-batch's tokens and
labels (``titan.distributed.cp_batch.PipelineCut``): the microbatch losses add up to the mean over
its own tokens, as the same run without pipeline parallel computes it.

The loss lives on the ranks of the last stage; the others report it after one sum over the
pipeline ranks, so every rank logs and checks the same value. Validation runs each batch
through the same schedule, forward only (:meth:`PipelineStep.evaluate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from titan.distributed.cp_batch import pipeline_cut
from titan.distributed.pipeline_masks import INPUT_BATCH
from titan.distributed.pipeline_parallel import Pipeline, build_pipeline


def scaled_loss(
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> Callable[..., torch.Tensor]:
    """``loss_fn`` for the schedule: a microbatch's mean loss times ``labels.numel() /
    batch_tokens`` (its share of the micro-batch), divided by ``accumulation_steps``."""

    def loss(
        pred: torch.Tensor, labels: torch.Tensor, *, batch_tokens: int, accumulation_steps: int
    ) -> torch.Tensor:
        """The microbatch's part of the micro-batch's loss."""
        share = labels.numel() / (batch_tokens * accumulation_steps)
        return loss_fn(pred, labels) * share

    return loss


class PipelineStep:
    """Forward and backward of one micro-batch through ``pipeline``'s schedule."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        accumulation_steps: int,
        device: torch.device,
        amp: Callable[[], Any],
        loss_context: Callable[[], Any],
        cut: Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.accumulation_steps = accumulation_steps
        self.device = device
        self.amp = amp
        self.loss_context = loss_context
        self.cut = cut
        """Under context parallel, this rank's share of a micro-batch and what every stage's
        forward takes with it (``titan.distributed.cp_batch.PipelineCut``); else None."""

    def _schedule_inputs(
        self, inputs: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """The inputs, labels and stage keyword arguments the schedule is fed."""
        if self.cut is None:
            return inputs, labels, self._stage_kwargs(inputs)
        cut = self.cut(inputs, labels)
        return cut.inputs, cut.labels, cut.model_kwargs

    def forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The micro-batch's loss (divided by the accumulation steps), the same on every
        pipeline rank; gradients are accumulated into this rank's stages."""
        pipeline = self.pipeline
        first, last = pipeline.has_first_stage, pipeline.has_last_stage
        inputs, labels, model_kwargs = self._schedule_inputs(inputs, labels)
        losses: list[torch.Tensor] = []
        loss_kwargs = {
            "batch_tokens": labels.numel(),
            "accumulation_steps": self.accumulation_steps,
        }
        args = (inputs,) if first else ()
        with self.loss_context(), self.amp():
            pipeline.schedule.step(
                *args,
                target=labels if last else None,
                losses=losses if last else None,
                return_outputs=False,
                loss_kwargs=loss_kwargs,
                **model_kwargs,
            )
        return self._reported(losses if last else [])

    def evaluate(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The batch's mean loss, forward only (validation), the same on every pipeline rank."""
        pipeline = self.pipeline
        first, last = pipeline.has_first_stage, pipeline.has_last_stage
        inputs, labels, model_kwargs = self._schedule_inputs(inputs, labels)
        losses: list[torch.Tensor] = []
        args = (inputs,) if first else ()
        with self.loss_context(), self.amp():
            pipeline.schedule.eval(
                *args,
                target=labels if last else None,
                losses=losses if last else None,
                return_outputs=False,
                loss_kwargs={"batch_tokens": labels.numel(), "accumulation_steps": 1},
                **model_kwargs,
            )
        return self._reported(losses if last else [])

    def _stage_kwargs(self, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """What every stage's forward is handed besides its input: the token ids, cut into the
        same microbatches, when the stages build per-document masks from them."""
        return {INPUT_BATCH: inputs} if self.pipeline.input_batch else {}

    def _reported(self, losses: list[torch.Tensor]) -> torch.Tensor:
        """The sum of the last stage's microbatch losses, on every pipeline rank."""
        local = [x.full_tensor() if isinstance(x, DTensor) else x for x in losses]
        total = torch.stack([x.detach().float() for x in local]).sum() if local else None
        if total is None:
            total = torch.zeros((), device=self.device)
        # Only the last stage's ranks hold a loss; the others add zero.
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.pipeline.pp_mesh.get_group())
        return total


def build_pipeline_step(
    model: torch.nn.Module,
    *,
    config: Any,
    parallel_dims: Any,
    world_mesh: Any,
    device: torch.device,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    accumulation_steps: int,
    parallelize: Callable[[torch.nn.Module], torch.nn.Module],
    init: Callable[[torch.nn.Module], None],
    amp: Callable[[], Any],
    loss_context: Callable[[], Any],
    eos_id: int | None = None,
) -> PipelineStep:
    """This rank's stages of the meta ``model`` (``parallelize``d, given weights by ``init``)
    and the schedule over them, as the trainer config ``config`` lays them out; ``eos_id`` ends
    the documents of per-document masks."""
    pipeline = build_pipeline(
        model,
        parallel_dims=parallel_dims,
        world_mesh=world_mesh,
        parallelism=config.parallelism,
        local_batch_size=config.training.local_batch_size,
        device=device,
        loss_fn=scaled_loss(loss_fn),
        parallelize=parallelize,
        init=init,
        eos_id=eos_id,
    )
    return PipelineStep(
        pipeline,
        accumulation_steps=accumulation_steps,
        device=device,
        amp=amp,
        loss_context=loss_context,
        # Per-document masks are refused under pipeline parallel, so no EOS id is needed.
        cut=pipeline_cut(model, eos_id=None, parallel_dims=parallel_dims, world_mesh=world_mesh),
    )


__all__ = ["PipelineStep", "build_pipeline_step", "scaled_loss"]
