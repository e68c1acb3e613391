"""The Flux image-text data loader."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.components._pending import not_yet
from titan.components.dataloader import ParallelAwareDataloader
from titan.models.flux.configs import Encoder


class FluxDataLoader(ParallelAwareDataloader):
    """Yields images with their T5 and CLIP encodings (the tokenizers come from ``encoder``).

    The trainer passes its ``hf_assets_path`` to ``build``; torchtitan copies it into this config
    instead, which lets the two drift apart.
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        """An image-text dataset from the registry."""

        dataset: str = "cc12m-test"
        """Dataset name from the dataset registry, e.g. cc12m-wds, cc12m-test, coco-validation."""
        infinite: bool = True
        """Start over when the dataset is exhausted instead of stopping."""
        classifier_free_guidance_prob: float = 0.0
        """Probability of dropping each text encoding independently, for classifier-free guidance."""
        img_size: int = 256
        """Width and height of the images."""
        generate_timesteps: bool = False
        """Attach stratified denoising timesteps to each sample (validation)."""
        encoder: Encoder = field(default_factory=Encoder)
        """Text encoders whose tokenizers the loader uses."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("FluxDataLoader")
