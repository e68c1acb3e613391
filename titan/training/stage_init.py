"""A pipeline stage initialised on an accelerator draws the random numbers the whole model
draws for its modules.

The whole model initialises its modules in one order (embeddings, blocks, final norm, output)
from one random stream. A stage holds a run of them; initialised on its own from the start of
the stream it would take the numbers of the modules before it (and two stages of the same shape
would get the same weights). So before a stage draws, each module before it is materialised
alone on the device, initialised and dropped: the stream then stands where the whole model's
does when it reaches the stage. Memory: one module at a time.

(On CPU, titan initialises the whole model and copies a stage's tensors from it instead:
``titan.training.weights``.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

UNIT_ENDS = ("tok_embeddings", "norm", "output")
"""The decoder's modules outside ``layers``; the embeddings draw first, the norm and the output
after every block."""


def init_order(model: nn.Module) -> list[str]:
    """The units of ``model`` in the order its ``init_weights`` draws for them."""
    return ["tok_embeddings", *(f"layers.{name}" for name in model.layers), "norm", "output"]


def owned_units(stage: nn.Module) -> list[str]:
    """The units the stage holds (those that are not ``None``)."""
    ends = [name for name in UNIT_ENDS if getattr(stage, name, None) is not None]
    return [*ends, *(f"layers.{name}" for name in stage.layers)]


def skip_earlier_draws(stage: nn.Module, whole: nn.Module, *, device: torch.device) -> list[str]:
    """Advance the random stream past the draws of the units of the meta model ``whole`` that
    come before ``stage``'s first one; returns those units."""
    order = init_order(whole)
    first = min(order.index(unit) for unit in owned_units(stage))
    skipped = order[:first]
    for unit in skipped:
        _draw_alone(whole, unit, device=device)
    return skipped


def _draw_alone(whole: nn.Module, unit: str, *, device: torch.device) -> None:
    """Initialise ``whole``'s ``unit`` alone on ``device`` (the model's own ``init_weights``,
    every other unit absent), then give its memory back."""
    ends: dict[str, Any] = {name: getattr(whole, name) for name in UNIT_ENDS}
    layers = whole.layers
    try:
        for name in UNIT_ENDS:
            setattr(whole, name, ends[name] if name == unit else None)
        whole.layers = nn.ModuleDict(
            {name: layer for name, layer in layers.items() if f"layers.{name}" == unit}
        )
        whole.to_empty(device=device)
        with torch.no_grad():
            whole.init_weights()
    finally:
        whole.to_empty(device="meta")
        for name, value in ends.items():
            setattr(whole, name, value)
        whole.layers = layers


__all__ = ["init_order", "owned_units", "skip_earlier_draws"]
