"""``FluxTrainer``: the trainer for Flux diffusion models.

It runs titan's training loop (checkpoints, stops, metrics, validation) with Flux's own step:
images become latents through the frozen autoencoder, captions become T5 and CLIP encodings,
and the transformer learns the flow from image latents to noise (rectified flow matching).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Annotated, Any

import tyro

from titan.components.dataloader import BaseDataLoader
from titan.components.tokenizer import BaseTokenizer
from titan.components.validate import Validator
from titan.models.flux.configs import Encoder, Inference, Validation
from titan.models.flux.flux_datasets import FluxDataLoader
from titan.models.flux.validate import FluxValidator
from titan.trainer import Trainer


class FluxTrainer(Trainer):
    """Trains a Flux model on images with text encodings."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        """A Flux training run."""

        # Flux builds its T5 and CLIP tokenizers inside the data loader, from ``encoder``.
        tokenizer: Annotated[BaseTokenizer.Config | None, tyro.conf.Suppress] = None
        """Unused by Flux: the data loader brings the T5 and CLIP tokenizers."""
        dataloader: BaseDataLoader.Config = field(default_factory=FluxDataLoader.Config)
        """Training data loader of image-text pairs."""
        validator: Validator.Config = field(default_factory=FluxValidator.Config)
        """Validation loop and generated images."""
        encoder: Encoder = field(default_factory=Encoder)
        """Text encoders and autoencoder."""
        validation: Validation = field(default_factory=Validation)
        """How images are sampled during validation."""
        inference: Inference = field(default_factory=Inference)
        """Inference settings."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        # torch is imported by the build only, so that reading configs never pays for it; an
        # unsupported torch is refused before it is imported.
        from titan import torch_support

        torch_support.check()
        from titan.models.flux.run import build_flux_run

        self.config = config
        self.parts = build_flux_run(config, **runtime)
        self.step = 0
        self.finished = False

    def forward_backward(self, microbatches: Any, **options: Any) -> Any:
        """Refused: the step-by-step library call takes token batches of the language models;
        a Flux run trains through ``train`` (or ``titan-train``)."""
        from titan.training.step_api import TrainerUsageError

        raise TrainerUsageError(
            "forward_backward takes token batches of the language models; a Flux run trains "
            "its image batches through train() (titan-train)"
        )

    def _accumulate(self, micro_batches: list[tuple[Any, Any]]) -> list[Any]:
        """Forward and backward of the step's ``(tokens, images)`` micro-batches; each loss
        is the micro-batch's mean squared error divided by the accumulation steps."""
        from titan.models.flux.conditioning import flow_batch, step_generator
        from titan.training import step_api

        parts = self.parts
        mesh_size = step_api.loss_mesh_size(parts)
        losses = []
        for micro, (inputs, images) in enumerate(micro_batches):
            generator = step_generator(parts.seed, step=self.step, micro=micro)
            batch = flow_batch(parts.frozen, inputs, images, rows=parts.rows, generator=generator)
            # Every rank's batch has the same size: the step's elements over all ranks.
            global_elements = batch.target.numel() * parts.dp_degree * len(micro_batches)
            with parts.amp():
                pred = parts.model(**batch.model_inputs())
                loss = parts.loss_fn(pred, batch.target) / (global_elements / mesh_size)
            del pred
            loss.backward()
            losses.append(loss.detach())
        return losses
