"""``TitanTrainer``: a TorchForge-style trainer actor on legacy ``JobConfig`` sections.

TorchForge's apps hold their trainer's settings as the legacy sections of a ``trainer:`` YAML
block (``job``, ``model``, ``optimizer``, ``lr_scheduler``, ``training``, ``parallelism``,
``checkpoint``, ...). ``TitanTrainer`` takes them as a dict, as a TOML or app YAML path, or as
keyword sections, through ``titan.migrate.legacy_config.trainer_config``: every legacy check,
era upgrade and report applies, and a misspelt key raises ``LegacyConfigError`` carrying
titan-validate's located text. It runs a ``PolicyTrainer``: ``setup()``,
``train_step(inputs, targets) -> float``, ``push_weights(policy_version)``, ``cleanup()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from titan.migrate.legacy_config import trainer_config

TARGET_FIELDS = {
    "labels": "cross entropy on next-token labels ([batch, seq], -100 where none)",
    "response": "the sampled tokens, the last columns of tokens ([batch, response])",
    "advantages": "one per sequence ([batch] or [batch, 1]) or per response token",
    "padding_mask": "which response tokens count ([batch, response])",
    "generator_logprobs": "the generator's log-probability of each response token "
    "(absent: on-policy, the ratio is 1)",
}
"""What a ``train_step`` target may hold: ``labels`` alone, or the GRPO fields."""
GRPO_REQUIRED = ("response", "advantages")


class TitanTrainer:
    """The trainer actor: legacy sections in, one optimizer step per ``train_step``."""

    def __init__(
        self,
        sections: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        /,
        *,
        weights_folder: str | os.PathLike[str] | None = None,
        clip_eps: float = 0.2,
        loss_mean: str = "token",
        generator_dtype: str = "bfloat16",
        keep_weights: int = 2,
        **section_kwargs: Any,
    ) -> None:
        """Check ``sections`` (or the keyword sections ``job=``, ``model=``, ...; not both)
        now; ``setup()`` builds the trainer. ``weights_folder`` receives ``push_weights``'
        snapshots (default ``<job.dump_folder>/weights``)."""
        from titan.rl.policy_trainer import PolicyTrainer

        if sections is not None and section_kwargs:
            raise TypeError(
                "TitanTrainer takes the sections as one dict or path, or as keyword "
                f"sections, not both (got {', '.join(sorted(section_kwargs))} besides)"
            )
        source: Any = section_kwargs if sections is None else sections
        world = int(os.environ.get("WORLD_SIZE", "1"))
        base = trainer_config(source, ngpu=world)
        self.config = PolicyTrainer.config_of(
            base,
            clip_eps=clip_eps,
            loss_mean=loss_mean,
            generator_dtype=generator_dtype,
            keep_snapshots=keep_weights,
        )
        _check_keywords(self.config, world, weights_folder)
        folder = weights_folder or os.path.join(base.dump_folder, "weights")
        self.weights_folder = os.fspath(folder)
        self.trainer: Any = None

    def setup(self) -> None:
        """Build the policy trainer (model, optimizer, checkpoint; resumes a checkpoint as
        ``titan-train`` would)."""
        if self.trainer is None:
            self.trainer = self.config.build()
            self.trainer.load_checkpoint(step=self.config.checkpoint.load_step)

    @property
    def step(self) -> int:
        """Optimizer steps taken (the policy version)."""
        return self._built("step").policy_version

    def train_step(self, inputs: Sequence[Mapping[str, Any]], targets: Sequence[Mapping]) -> float:
        """One optimizer step on this data-parallel rank's element of ``inputs`` (``tokens``:
        [batch, seq]) and ``targets`` (``TARGET_FIELDS``); returns the step's loss.

        Forward/backward, gradient clipping, optimizer and LR schedule step, then a checkpoint
        when ``checkpoint.interval`` says so (or at ``training.steps``)."""
        from titan.training.step_api import Microbatch, TrainerUsageError

        trainer = self._built("train_step")
        rank = trainer.parts.parallel_dims.dp_rank(trainer.parts.world_mesh)
        for name, items in (("inputs", inputs), ("targets", targets)):
            if isinstance(items, Mapping) or not isinstance(items, Sequence) or len(items) <= rank:
                raise TrainerUsageError(
                    f"train_step: {name} must be a list with one dict per data-parallel rank "
                    f"(this is rank {rank})"
                )
        item, target = inputs[rank], targets[rank]
        if not isinstance(item, Mapping) or "tokens" not in item:
            raise TrainerUsageError("train_step: each input must be a dict holding 'tokens'")
        if not isinstance(target, Mapping):
            raise TrainerUsageError("train_step: each target must be a dict")
        unknown = sorted(set(target) - set(TARGET_FIELDS))
        if unknown:
            accepted = "; ".join(f"{k}: {v}" for k, v in TARGET_FIELDS.items())
            raise TrainerUsageError(
                f"train_step: unknown target field(s) {', '.join(map(repr, unknown))}; "
                f"accepted: {accepted}"
            )
        tokens = item["tokens"]
        if "labels" in target:
            if set(target) != {"labels"}:
                raise TrainerUsageError(
                    "train_step: a target holds labels (cross entropy) or the GRPO fields, not both"
                )
            metrics = trainer.cross_entropy_step(
                [Microbatch(token_ids=tokens, labels=target["labels"])]
            )
        else:
            metrics = trainer.forward_backward([_grpo_microbatch(tokens, target)])
        trainer.optim_step()
        version = trainer.policy_version
        trainer.save_checkpoint(step=version, last_step=version == self.config.training.steps)
        return float(metrics.loss)

    def push_weights(self, policy_version: int) -> str | None:
        """Publish the weights as snapshot ``v<policy_version>`` of ``weights_folder``, in
        ``generator_dtype`` with Hugging Face names (``titan.rl.snapshots``); returns its path
        (None on the ranks that do not write)."""
        trainer = self._built("push_weights")
        return trainer.push_model_state_dict(self.weights_folder, version=policy_version)

    def cleanup(self) -> None:
        """Finish pending checkpoint saves and close the trainer; calling it twice does
        nothing."""
        if self.trainer is not None:
            self.trainer.close()

    def _built(self, call: str) -> Any:
        """The policy trainer; ``TrainerUsageError`` before ``setup()``."""
        from titan.training.step_api import TrainerUsageError

        if self.trainer is None:
            raise TrainerUsageError(f"{call}: call setup() first")
        return self.trainer


POLICY_KEYWORDS = {
    "clip_eps": "clip_eps",
    "loss_mean": "loss_mean",
    "generator_dtype": "generator_dtype",
    "keep_snapshots": "keep_weights",
}
"""The policy config's fields -> the ``TitanTrainer`` keyword that sets each."""


def _check_keywords(config: Any, world: int, weights_folder: Any) -> None:
    """``TrainerUsageError`` for a policy keyword the config's checks refuse (a ``clip_eps``
    out of range, an unknown ``loss_mean``, ...) or a ``weights_folder`` that is not a path,
    at the constructor rather than at ``setup()``."""
    from titan.config.check import check_config
    from titan.training.step_api import TrainerUsageError

    if weights_folder is not None and not isinstance(weights_folder, str | os.PathLike):
        raise TrainerUsageError(
            f"TitanTrainer: weights_folder must be a path, not {type(weights_folder).__name__}"
        )
    for finding in check_config(config, ngpu=world, locate=lambda path: None):
        keyword = POLICY_KEYWORDS.get(finding.path)
        if keyword is not None and finding.severity.value == "error":
            message = finding.message.replace(f"`{finding.path}`", f"`{keyword}`")
            hint = f" ({finding.hint})" if finding.hint else ""
            raise TrainerUsageError(f"TitanTrainer: {message}{hint}")


def _grpo_microbatch(tokens: Any, target: Mapping[str, Any]) -> Any:
    """The micro-batch of a GRPO target: the response's labels, mask and log-probabilities
    placed at the positions whose logits predict them (the last ``response`` columns)."""
    import torch

    from titan.training.step_api import TrainerUsageError

    missing = [name for name in GRPO_REQUIRED if name not in target]
    if missing:
        raise TrainerUsageError(
            f"train_step: a GRPO target needs {', '.join(map(repr, missing))} (or 'labels' "
            "alone for cross entropy)"
        )
    response = target["response"]
    if not (isinstance(tokens, torch.Tensor) and isinstance(response, torch.Tensor)):
        raise TrainerUsageError("train_step: tokens and response must be tensors")
    for name, tensor in (("tokens", tokens), ("response", response)):
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
            raise TrainerUsageError(
                f"train_step: {name} must hold integer token ids, not {tensor.dtype}"
            )
    padding = target.get("padding_mask")
    if isinstance(padding, torch.Tensor) and padding.dtype != torch.bool:
        if bool(((padding != 0) & (padding != 1)).any()):
            raise TrainerUsageError(
                "train_step: padding_mask must be bool (or 0 and 1), not other values of "
                f"{padding.dtype}"
            )
    if tokens.dim() != 2 or response.dim() != 2 or response.shape[0] != tokens.shape[0]:
        raise TrainerUsageError(
            f"train_step: tokens {list(tokens.shape)} and response {list(response.shape)} "
            "must be [batch, seq] and [batch, response]"
        )
    length, seq = response.shape[1], tokens.shape[1]
    if not 0 < length < seq:
        raise TrainerUsageError(
            f"train_step: the response ({length} tokens) must be shorter than tokens ({seq})"
        )
    try:
        return _placed(tokens, response, target)
    except (RuntimeError, TypeError, ValueError) as error:  # a field of the wrong shape
        raise TrainerUsageError(
            f"train_step: a GRPO target field does not fit tokens {list(tokens.shape)} and "
            f"response {list(response.shape)}: {error}"
        ) from None


def _placed(tokens: Any, response: Any, target: Mapping[str, Any]) -> Any:
    """The micro-batch of ``_grpo_microbatch``, its fields placed under the response."""
    import torch

    from titan.rl.grpo import policy_microbatch
    from titan.training.step_api import IGNORE_INDEX

    length, seq = response.shape[1], tokens.shape[1]
    where = slice(seq - length - 1, seq - 1)  # logits at t predict token t + 1
    labels = torch.full_like(tokens, IGNORE_INDEX)
    labels[:, where] = response
    mask = torch.zeros(tokens.shape, dtype=torch.bool)
    padding = target.get("padding_mask")
    mask[:, where] = True if padding is None else torch.as_tensor(padding).bool()
    generator = target.get("generator_logprobs")
    if generator is not None:
        placed = torch.zeros(tokens.shape, dtype=torch.float32)
        placed[:, where] = torch.as_tensor(generator).float()
        generator = placed
    advantages = torch.as_tensor(target["advantages"]).float()
    if advantages.dim() == 2 and advantages.shape[1] == 1:
        advantages = advantages[:, 0]
    elif advantages.dim() == 2:
        placed = torch.zeros(tokens.shape, dtype=torch.float32)
        placed[:, where] = advantages
        advantages = placed
    return policy_microbatch(
        token_ids=tokens,
        labels=labels,
        generator_logprobs=generator,
        advantages=advantages,
        loss_mask=mask,
    )


__all__ = ["TARGET_FIELDS", "TitanTrainer"]
