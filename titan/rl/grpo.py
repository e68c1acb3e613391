"""The GRPO clipped policy-gradient loss, as a ``loss_fn`` for ``Trainer.forward_backward``.

Per valid token ``t`` of a sampled sequence with advantage ``A``:
``ratio = exp(logprob_t - generator_logprob_t)`` and
``loss_t = -min(ratio * A, clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)``; no reference model,
no KL term. ``loss_mean = "token"`` averages over every valid token of the step,
``"sequence"`` averages each sequence over its own valid tokens, then over the sequences.

The trainer divides what a ``loss_fn`` returns by the step's valid-token count; a sequence mean
therefore returns ``sum over sequences of (their token mean) × tokens / sequences``, with the
step's global counts, so the division leaves the mean over sequences.
"""

from __future__ import annotations

from typing import Any

import torch

from titan.rl.batch_checks import check_policy_batch
from titan.training.step_api import IGNORE_INDEX, Microbatch

LOSS_MEANS = ("token", "sequence")
"""How the per-token losses are averaged."""


def advantages_per_token(advantages: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``advantages`` ([batch] per sequence, or [batch, seq] per token) as [batch, seq]."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    return advantages.expand(shape)


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label under ``logits`` (float32); 0 where the label is -100."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    safe = torch.where(labels == IGNORE_INDEX, 0, labels)
    picked = logprobs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(labels == IGNORE_INDEX, 0.0, picked)


def per_token_loss(
    logprobs: torch.Tensor,
    generator_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_eps: float,
) -> torch.Tensor:
    """``-min(ratio * A, clip(ratio) * A)`` per token ([batch, seq])."""
    ratio = torch.exp(logprobs - generator_logprobs.float())
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -torch.minimum(unclipped, clipped)


class GRPOLoss:
    """``loss_fn(logits, microbatch)`` for one step: the sum the trainer divides by
    ``num_global_valid_tokens`` (see the module's docstring)."""

    def __init__(
        self,
        *,
        clip_eps: float,
        loss_mean: str,
        num_global_valid_tokens: int,
        num_global_sequences: int,
    ) -> None:
        self.clip_eps = clip_eps
        self.loss_mean = loss_mean
        # Only the sequence mean rescales: see the module's docstring.
        self.scale = num_global_valid_tokens / max(num_global_sequences, 1)

    def __call__(self, logits: Any, batch: Microbatch) -> torch.Tensor:
        """The summed (token mean) or rescaled per-sequence (sequence mean) loss of ``batch``."""
        labels = batch.labels
        valid = labels != IGNORE_INDEX
        logprobs = token_logprobs(logits, labels)
        advantages = advantages_per_token(batch.extras["advantages"].float(), labels.shape)
        generator = batch.extras.get("generator_logprobs")
        # Without the generator's log-probabilities the samples are on-policy: the ratio is 1
        # and its gradient that of the log-probability.
        generator = logprobs.detach() if generator is None else generator
        # A masked token's values are never read: not even a NaN there reaches the gradients
        # (where() passes a zero gradient, but 0 * NaN is NaN).
        generator = torch.where(valid, generator.float(), logprobs.detach())
        advantages = torch.where(valid, advantages, 0.0)
        losses = per_token_loss(logprobs, generator, advantages, clip_eps=self.clip_eps)
        losses = torch.where(valid, losses, 0.0)
        if self.loss_mean == "token":
            return losses.sum()
        counts = valid.sum(dim=1)
        per_sequence = losses.sum(dim=1) / counts.clamp(min=1)
        return per_sequence.sum() * self.scale


def policy_microbatch(
    *,
    token_ids: torch.Tensor,
    labels: torch.Tensor,
    generator_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor | None = None,
) -> Microbatch:
    """A ``Microbatch`` for ``PolicyTrainer.forward_backward``: ``generator_logprobs[b, t]`` is
    the generator's log-probability of ``labels[b, t]``; ``advantages`` are per sequence
    ([batch]) or per token; ``loss_mask`` keeps the sampled tokens (not the prompt's).
    ``generator_logprobs=None``: the samples are on-policy (the ratio is 1)."""
    extras = {"advantages": advantages}
    if generator_logprobs is not None:
        extras["generator_logprobs"] = generator_logprobs
    return Microbatch(token_ids=token_ids, labels=labels, loss_mask=loss_mask, extras=extras)


__all__ = [
    "GRPOLoss",
    "LOSS_MEANS",
    "check_policy_batch",
    "per_token_loss",
    "policy_microbatch",
    "token_logprobs",
]
