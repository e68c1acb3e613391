"""Flux's training loss: the squared error of the predicted flow velocity, summed.

The trainer divides the sum by the step's element count (over every data-parallel rank), so the
logged loss is the mean squared error per latent element, as in torchtitan v0.2.2.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def mse_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum of squared errors of ``pred`` against ``target``, in float32."""
    return torch.nn.functional.mse_loss(pred.float(), target.float().detach(), reduction="sum")


def build_mse_loss() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The family's loss function (the record's ``build_loss_fn``)."""
    return mse_loss


__all__ = ["build_mse_loss", "mse_loss"]
