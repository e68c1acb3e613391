"""Optimizers: one per model part, stepped together."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class OptimizersContainer(Configurable):
    """One Adam-family optimizer per model part, stepped after backward."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """The Adam-family optimizer."""

        name: str = "AdamW"
        """Optimizer class; only Adam and AdamW are accepted when the trainer builds it."""
        lr: float = 8e-4
        """Peak learning rate."""
        beta1: float = 0.9
        """Adam beta1."""
        beta2: float = 0.95
        """Adam beta2."""
        eps: float = 1e-8
        """Adam epsilon."""
        weight_decay: float = 0.1
        """Weight decay."""
        implementation: Literal["for-loop", "foreach", "fused"] = "fused"
        """Optimizer kernel flavour; fused runs on CUDA only."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet(type(self).__name__)


class OptimizersInBackwardContainer(OptimizersContainer):
    """Steps each parameter's optimizer inside backward, as soon as its gradient is ready.

    Saves the memory of holding all gradients; rules out gradient clipping, expert and pipeline
    parallel (the legacy ``optimizer.early_step_in_backward = true``).
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(OptimizersContainer.Config):
        """Same options as the plain optimizer; choosing this class is the switch."""
