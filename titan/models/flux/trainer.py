"""``FluxTrainer``: the trainer for Flux diffusion models."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Annotated, Any

import tyro

from titan.components._pending import not_yet
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
        raise not_yet("FluxTrainer")
