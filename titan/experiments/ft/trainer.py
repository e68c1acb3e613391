"""``FaultTolerantTrainer``: the trainer with TorchFT replica groups."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.components._pending import not_yet
from titan.experiments.ft.manager import FaultTolerance
from titan.trainer import Trainer


class FaultTolerantTrainer(Trainer):
    """A trainer whose data-parallel replicas can fail and rejoin without stopping the job."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        """A training run with fault tolerance."""

        fault_tolerance: FaultTolerance.Config = field(default_factory=FaultTolerance.Config)
        """TorchFT settings (legacy ``[fault_tolerance]``)."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        # With fault tolerance off this is the plain trainer, as in torchtitan.
        if config.fault_tolerance.enable:
            raise not_yet("FaultTolerantTrainer", what="fault tolerance (TorchFT replica groups)")
        super().__init__(config=config, **runtime)
