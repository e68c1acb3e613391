"""flux: FLUX.1 diffusion transformers, every v0.2.2 flavor with its hyperparameters.

The trainer, data loader and validator configs of flux live beside this in ``trainer.py``,
``flux_datasets.py`` and ``validate.py``; importing this package does not import them.
"""

from __future__ import annotations

from titan.models.flux import flavors
from titan.models.flux.family import FAMILY
from titan.models.flux.model_config import (
    AutoEncoder,
    FluxModel,
    FluxRoPE,
)
from titan.protocols.model_spec import ModelSpec

FLAVORS: tuple[str, ...] = tuple(flavors.FLAVORS)
"""Flavor names, in torchtitan's order: flux-dev, flux-schnell, flux-debug."""


def model_registry(flavor: str) -> ModelSpec:
    """A fresh ``ModelSpec`` of flux ``flavor`` (e.g. ``"flux-dev"``); ``ValueError`` if unknown."""
    return FAMILY.model_spec(flavor)


__all__ = [
    "FLAVORS",
    "AutoEncoder",
    "FluxModel",
    "FluxRoPE",
    "model_registry",
]
