"""Learning-rate schedules: linear warmup, then an optional stable phase and a decay."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class LRSchedulersContainer(Configurable):
    """One LR scheduler per optimizer, all following the same schedule."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Warmup, decay and the learning-rate floor."""

        warmup_steps: int = 200
        """Length of the linear warmup in steps."""
        total_steps: int | None = None
        """Horizon of the schedule in steps; unset means training.steps."""
        decay_ratio: float | None = None
        """Fraction of steps spent decaying (WSD schedule); unset decays right after warmup."""
        decay_type: Literal["linear", "sqrt", "cosine"] = "linear"
        """Shape of the decay phase."""
        min_lr_factor: float = 0.0
        """Floor of the learning rate as a fraction of optimizer.lr."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("LRSchedulersContainer")
