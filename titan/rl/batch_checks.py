"""What ``PolicyTrainer`` refuses in a micro-batch before any forward runs.

Every check raises ``TrainerUsageError`` naming the micro-batch, the field and the first
offending position and value, so nothing of the trainer's state (gradients, optimizer, learning
rate schedule, policy version) moves for an input the loss cannot use: token ids or labels
outside the vocabulary, a micro-batch with no token to learn from, advantages or generator
log-probabilities that are not finite, log-probabilities above 0.
"""

from __future__ import annotations

import torch

from titan.training.step_api import (
    IGNORE_INDEX,
    Microbatch,
    TrainerUsageError,
    check_token_range,
    first_index,
    index_text,
    vocab_size_of,
)


def valid_tokens(batch: Microbatch) -> torch.Tensor:
    """Where the loss reads a token ([batch, seq], bool): a label that is not -100, kept by
    ``loss_mask``."""
    valid = batch.labels != IGNORE_INDEX
    if batch.loss_mask is not None:
        valid = valid & batch.loss_mask.to(valid.device)
    return valid


def check_some_valid(batch: Microbatch, index: int) -> None:
    """At least one token whose loss counts: an all-false ``loss_mask`` (or every label -100)
    leaves the loss 0 / 0."""
    if bool(valid_tokens(batch).any()):
        return
    cause = "its loss_mask is false everywhere" if batch.loss_mask is not None else ""
    cause = cause or "every label is -100"
    raise TrainerUsageError(
        f"microbatch {index}: no token's loss counts ({cause}); leave it out of the call, or "
        "keep at least one sampled token"
    )


def check_policy_values(batch: Microbatch, index: int) -> None:
    """``advantages`` and ``generator_logprobs`` finite, and the log-probabilities <= 0, at
    every token the loss reads (a masked position's value is never read)."""
    valid = valid_tokens(batch)
    advantages = batch.extras["advantages"]
    if advantages.dim() == 1:
        _check_finite(advantages, valid.any(dim=1), "advantages", index)
    else:
        _check_finite(advantages, valid, "advantages", index)
    logprobs = batch.extras.get("generator_logprobs")
    if logprobs is None:
        return
    _check_finite(logprobs, valid, "generator_logprobs", index)
    above = valid & (logprobs > 0)
    if bool(above.any()):
        where = first_index(above)
        raise TrainerUsageError(
            f"microbatch {index}: generator_logprobs{index_text(where)} is {float(logprobs[where])}, "
            "above 0: a log-probability is at most 0 (pass the generator's log-probabilities, "
            "not its logits or probabilities)"
        )


def _check_finite(tensor: torch.Tensor, read: torch.Tensor, name: str, index: int) -> None:
    """``tensor`` finite wherever ``read`` is true."""
    bad = read & ~torch.isfinite(tensor)
    if bool(bad.any()):
        where = first_index(bad)
        raise TrainerUsageError(
            f"microbatch {index}: {name}{index_text(where)} is {float(tensor[where])}; the policy "
            "loss needs finite values at every token it reads"
        )


def check_policy_batch(batch: Microbatch, index: int) -> None:
    """``TrainerUsageError`` unless ``batch`` carries floating ``advantages`` per sequence or
    per token and, when given (absent: on-policy samples), ``generator_logprobs`` of the
    tokens' shape."""
    shape = tuple(batch.token_ids.shape)
    for name in ("generator_logprobs", "advantages"):
        tensor = batch.extras.get(name)
        if tensor is None and name == "generator_logprobs":
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TrainerUsageError(
                f"microbatch {index}: the policy loss needs extras[{name!r}] (a float tensor); "
                "build micro-batches with titan.rl.policy_microbatch"
            )
        if not tensor.dtype.is_floating_point:
            raise TrainerUsageError(
                f"microbatch {index}: extras[{name!r}] must be a floating tensor, not "
                f"{tensor.dtype}"
            )
    logprobs, advantages = batch.extras.get("generator_logprobs"), batch.extras["advantages"]
    if logprobs is not None and tuple(logprobs.shape) != shape:
        raise TrainerUsageError(
            f"microbatch {index}: generator_logprobs has shape {list(logprobs.shape)}, "
            f"token_ids {list(shape)}; they must match"
        )
    if tuple(advantages.shape) not in (shape, shape[:1]):
        raise TrainerUsageError(
            f"microbatch {index}: advantages must be [batch] (one per sequence) or "
            f"[batch, seq], not {list(advantages.shape)}"
        )


def check_all(batch: Microbatch, index: int, *, vocab_size: int | None, policy: bool) -> None:
    """Every check of this module on one micro-batch (``policy``: the GRPO fields too)."""
    check_token_range(batch, index, vocab_size)
    if policy:
        check_policy_batch(batch, index)
    check_some_valid(batch, index)
    if policy:
        check_policy_values(batch, index)


__all__ = [
    "check_all",
    "check_policy_batch",
    "check_policy_values",
    "check_some_valid",
    "check_token_range",
    "valid_tokens",
    "vocab_size_of",
]
