"""Flux validation: loss on held-out images plus sampled images saved to disk."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.components._pending import not_yet
from titan.components.dataloader import BaseDataLoader
from titan.components.validate import Validator
from titan.models.flux.flux_datasets import FluxDataLoader


def _validation_loader() -> FluxDataLoader.Config:
    return FluxDataLoader.Config(dataset="coco-validation", generate_timesteps=True, infinite=False)


class FluxValidator(Validator):
    """Validates a Flux model and saves the images it generates."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        """Flux validation loop and image output."""

        dataloader: BaseDataLoader.Config = field(default_factory=_validation_loader)
        """Data loader of the validation images; its guidance dropout is forced off."""
        all_timesteps: bool = False
        """Generate all stratified timesteps per sample instead of round robin."""
        # torchtitan's registry changed these two defaults (-1, "validation_images"); titan keeps
        # the legacy ones so that an unset legacy value still means the same thing.
        save_img_count: int = 1
        """How many validation images to generate and save; -1 means all samples."""
        save_img_folder: str = "img"
        """Directory for the images generated during validation."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("FluxValidator")
