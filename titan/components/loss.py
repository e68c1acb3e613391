"""The training loss: token-level cross entropy over the whole batch."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of logits ``[bs, seq, vocab]`` against labels ``[bs, seq]``.

    The logits are upcast to float32 first: a bfloat16 log-softmax over a large vocabulary
    loses enough precision to change the loss curve.
    """
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def build_cross_entropy_loss() -> LossFn:
    """The loss function ``fn(logits, labels) -> scalar`` named by llama3's ``ModelSpec``."""
    return cross_entropy_loss


__all__ = ["LossFn", "build_cross_entropy_loss", "cross_entropy_loss"]
