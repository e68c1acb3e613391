"""The validation loop run every ``freq`` training steps."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.components._pending import not_yet
from titan.components.dataloader import BaseDataLoader
from titan.config.configurable import Configurable
from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader


class BaseValidator(Configurable):
    """Abstract: how often validation runs."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """When validation runs."""

        freq: int = 10
        """Validate at step 1 and then every N steps."""


def _validation_loader() -> HuggingFaceTextDataLoader.Config:
    return HuggingFaceTextDataLoader.Config(dataset="c4_validation", infinite=False)


class Validator(BaseValidator):
    """Computes the loss on a held-out dataset without updating the model."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseValidator.Config):
        """The validation loop and its data."""

        enable: bool = False
        """Run validation during training."""
        steps: int = -1
        """Validation steps per run; -1 consumes the whole validation set."""
        dataloader: BaseDataLoader.Config = field(default_factory=_validation_loader)
        """Data loader of the validation set; whether it repeats follows ``steps``."""
        # torchtitan dropped these two and always validates with the training batch size and
        # sequence length; a legacy [validation] table could set both, so titan keeps a home.
        local_batch_size: int | None = None
        """Validation batch size per data-parallel rank; unset follows training.local_batch_size."""
        seq_len: int | None = None
        """Validation sequence length in tokens; unset follows training.seq_len."""

        def __post_init__(self) -> None:
            # A wrong type is left to the type check, which reports it with the field's path.
            if isinstance(self.steps, int) and not (self.steps > 0 or self.steps == -1):
                raise ValueError(f"validator.steps must be positive or -1, not {self.steps}")

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("Validator")
