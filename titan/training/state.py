"""Small pieces of run state: the step counter that checkpoints carry, and garbage collection."""

from __future__ import annotations

import dataclasses
import gc
import logging
from typing import Any

log = logging.getLogger("titan")


@dataclasses.dataclass(slots=True)
class TrainState:
    """What the loop itself must resume: the step reached and the tokens seen so far."""

    step: int = 0
    ntokens_seen: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.ntokens_seen = int(state["ntokens_seen"])


class GarbageCollection:
    """Python's collector is paused during training and run every ``gc_freq`` steps instead.

    An automatic collection can start in the middle of a step on one rank and not on another,
    which stalls every collective behind it; collecting at step boundaries keeps ranks in step.
    """

    def __init__(self, *, gc_freq: int, debug: bool) -> None:
        if gc_freq < 1:
            raise ValueError(f"training.gc_freq must be positive, not {gc_freq}")
        self.gc_freq = gc_freq
        self.debug = debug
        gc.disable()
        gc.collect(1)

    def run(self, step: int) -> None:
        """Collect when ``step`` is due (every step under ``gc_debug``)."""
        if self.debug or (step > 1 and step % self.gc_freq == 0):
            gc.collect(1)

    def close(self) -> None:
        gc.enable()
