"""The validation loop run every ``freq`` training steps."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import field
from typing import Any

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

    def __init__(
        self,
        *,
        config: Config,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: Any,
        seq_len: int,
        local_batch_size: int,
        loss_fn: Callable[[Any, Any], Any],
        attention_masks: Callable[[Any], Any],
        metrics: Any,
        device: Any,
        dp_mesh: Any,
        amp: Callable[[], Any],
        loss_context: Callable[[], Any],
    ) -> None:
        self.config = config
        # A fixed number of steps may wrap around a small set; -1 reads it exactly once.
        self.loader_config = dataclasses.replace(config.dataloader, infinite=config.steps != -1)
        self.loader_args = {
            "dp_world_size": dp_world_size,
            "dp_rank": dp_rank,
            "tokenizer": tokenizer,
            "seq_len": seq_len,
            "local_batch_size": local_batch_size,
        }
        self.loader_config.build(**self.loader_args)  # a bad dataset fails now, not at step N
        self.loss_fn = loss_fn
        # The model's masks of a batch, made the way training makes them (the same EOS id).
        self.attention_masks = attention_masks
        self.metrics = metrics
        self.device = device
        self.dp_mesh = dp_mesh
        self.amp = amp
        self.loss_context = loss_context
        self.forward_loss: Any = None
        """``forward_loss(inputs, labels)``: a batch's mean loss computed elsewhere (a pipeline's
        schedule, which holds the model's stages); None: ``model_parts[0]`` and ``loss_fn``."""

    def should_validate(self, step: int) -> bool:
        """Validation runs at step 1 and every ``freq`` steps."""
        return step == 1 or step % self.config.freq == 0

    def validate(self, model_parts: list[Any], step: int) -> float:
        """The token-weighted mean loss over the validation batches (the same ones every time)."""
        import torch

        from titan.distributed.reductions import dist_min

        # A fresh loader each time, so every validation sees the same batches and the
        # numbers are comparable from one validation to the next.
        batches = iter(self.loader_config.build(**self.loader_args))
        for part in model_parts:
            part.eval()
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        tokens, done = 0, 0
        with torch.no_grad():
            while self.config.steps == -1 or done < self.config.steps:
                batch = next(batches, None)
                # Sharded models run collectives in forward: every data-parallel rank must take
                # the same number of batches, so they stop together at the shortest shard.
                have = torch.tensor(float(batch is not None))
                if dist_min(have, self.dp_mesh) == 0.0:
                    break
                assert batch is not None
                inputs, labels = (t.to(self.device) for t in batch)
                if self.forward_loss is not None:
                    loss = self.forward_loss(inputs, labels)
                else:
                    with self.loss_context(), self.amp():
                        pred = model_parts[0](inputs, attention_masks=self.attention_masks(inputs))
                        loss = self.loss_fn(pred, labels).detach()
                if hasattr(loss, "full_tensor"):  # loss parallel gives a replicated DTensor
                    loss = loss.full_tensor()
                loss_sum += loss.double() * labels.numel()
                tokens += labels.numel()
                done += 1
        for part in model_parts:
            part.train()
        batch = f"{self.loader_args['local_batch_size']}×{self.loader_args['seq_len']} tokens"
        return self.log_mean_loss(step, loss_sum, tokens, batch=batch)

    def log_mean_loss(self, step: int, loss_sum: Any, count: int, *, batch: str) -> float:
        """The loss per element over every data-parallel rank (``loss_sum`` over ``count``
        elements on this one), logged for ``step``; ``ValueError`` when no rank had a ``batch``."""
        import torch

        from titan.distributed.reductions import dist_sum

        total = dist_sum(torch.tensor(float(count)), self.dp_mesh)
        if total == 0:
            raise ValueError(
                f"the validation set {self.config.dataloader.dataset!r} gave no batch of {batch}"
            )
        value = dist_sum(loss_sum, self.dp_mesh) / total
        self.metrics.log_validation(step=step, loss=value)
        return value
