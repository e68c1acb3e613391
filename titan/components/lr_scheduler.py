"""Learning-rate schedules: linear warmup, then an optional stable phase and a decay."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Any, Literal

from titan.config.configurable import Configurable

log = logging.getLogger(__name__)

DECAY_SHAPES = {
    "linear": lambda progress: 1 - progress,
    "sqrt": lambda progress: 1 - math.sqrt(progress),
    "cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
}
"""Decay factor (1 at the start of the decay, 0 at its end) for each ``decay_type``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SchedulePhases:
    """Lengths of the warmup, stable and decay phases, in scheduler steps."""

    warmup_steps: int
    stable_steps: int
    decay_steps: int


def schedule_phases(
    *, warmup_steps: int, total_steps: int, decay_ratio: float | None
) -> SchedulePhases:
    """Split ``total_steps`` into phases exactly as torchtitan does (see ``lr_factor``)."""
    if warmup_steps > total_steps:
        log.warning(
            "lr_scheduler.warmup_steps (%d) exceeds the total steps (%d); warming up over %d",
            warmup_steps,
            total_steps,
            total_steps,
        )
        warmup_steps = total_steps
    if decay_ratio is None:
        decay_steps = total_steps - warmup_steps
    else:
        decay_steps = round(total_steps * decay_ratio)
        if warmup_steps + decay_steps > total_steps:
            log.warning(
                "lr_scheduler: warmup (%d) + decay (%d) steps exceed the total steps (%d); "
                "decaying over %d steps",
                warmup_steps,
                decay_steps,
                total_steps,
                total_steps - warmup_steps,
            )
            decay_steps = total_steps - warmup_steps
    # torchtitan adds one virtual stable step so that the last trained step does not get lr 0.
    stable_steps = total_steps + 1 - warmup_steps - decay_steps
    return SchedulePhases(
        warmup_steps=warmup_steps, stable_steps=stable_steps, decay_steps=decay_steps
    )


def lr_factor(
    step: int,
    *,
    phases: SchedulePhases,
    decay_type: str,
    min_lr_factor: float,
) -> float:
    """The multiplier of the peak lr after ``step`` scheduler steps (LambdaLR's lambda).

    Matches torchtitan's ``linear_warmup_stable_decay`` (torchtitan/components/lr_scheduler.py,
    the version with ``min_lr_factor``, ``total_steps`` and the virtual last stable step), checked
    against its tests/unit_tests/test_lr_scheduler.py tables: steps are 0-indexed, hence the
    ``step + 1`` in the warmup (10 steps, warmup 2 -> 0.5, 1.0, ...) and in the decay progress.
    """
    warmup_stable = phases.warmup_steps + phases.stable_steps
    if step < phases.warmup_steps:
        return (step + 1) / phases.warmup_steps
    if step < warmup_stable or phases.decay_steps == 0:
        return 1.0
    # torchtitan lets progress exceed 1 when the run outlives total_steps (a negative lr for the
    # linear shape); hold the floor there instead. Within the horizon the values are identical.
    progress = min((step + 1 - warmup_stable) / phases.decay_steps, 1.0)
    return min_lr_factor + (1 - min_lr_factor) * DECAY_SHAPES[decay_type](progress)


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

    def __init__(self, *, config: Config, optimizers: Any, training_steps: int) -> None:
        from torch.optim.lr_scheduler import LambdaLR

        if config.decay_type not in DECAY_SHAPES:
            raise ValueError(
                f"lr_scheduler.decay_type {config.decay_type!r} is not one of "
                f"{', '.join(DECAY_SHAPES)}"
            )
        if config.warmup_steps < 0:
            raise ValueError(f"lr_scheduler.warmup_steps must be >= 0, not {config.warmup_steps}")
        if config.decay_ratio is not None and not 0.0 <= config.decay_ratio <= 1.0:
            raise ValueError(
                f"lr_scheduler.decay_ratio must lie in [0, 1], not {config.decay_ratio}"
            )
        total_steps = config.total_steps if config.total_steps is not None else training_steps
        self.phases = schedule_phases(
            warmup_steps=config.warmup_steps,
            total_steps=total_steps,
            decay_ratio=config.decay_ratio,
        )
        self.lr_lambda = functools.partial(
            lr_factor,
            phases=self.phases,
            decay_type=config.decay_type,
            min_lr_factor=config.min_lr_factor,
        )
        self.schedulers = [LambdaLR(opt, self.lr_lambda) for opt in optimizers]
        if not self.schedulers:
            raise ValueError("the model has no trainable parameters, so there is no lr to schedule")

    def __iter__(self):
        return iter(self.schedulers)

    def __len__(self) -> int:
        return len(self.schedulers)

    def step(self) -> None:
        """Advance every scheduler by one step."""
        for scheduler in self.schedulers:
            scheduler.step()

    def last_lr(self) -> float:
        """The learning rate the next optimizer step uses (first group of the first optimizer)."""
        return float(self.schedulers[0].get_last_lr()[0])

    def state_dict(self) -> dict[str, Any]:
        # The schedule is a pure function of the step count, and every scheduler shares it, so the
        # step count is the whole state; it also loads into any number of schedulers (resharding,
        # or the in-backward optimizer's one scheduler per parameter).
        return {"last_epoch": self.schedulers[0].last_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        last_epoch = int(state_dict["last_epoch"])
        for scheduler in self.schedulers:
            scheduler.last_epoch = last_epoch
            scheduler._step_count = last_epoch + 1
            lrs = [base_lr * self.lr_lambda(last_epoch) for base_lr in scheduler.base_lrs]
            # Write the lr into the groups too, so a resume is exact whatever order the optimizer
            # and the scheduler states are loaded in.
            for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr
            scheduler._last_lr = lrs
