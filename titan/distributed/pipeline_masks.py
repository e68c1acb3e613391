"""Per-document attention masks under pipeline parallel: every stage builds its own.

A ``block_causal`` mask comes from the token ids (an EOS token ends a document), which only the
first stage receives as its input; later stages receive hidden states. So, as torchtitan does,
the whole batch of token ids is also handed to the schedule as the keyword ``input_batch``:
torch cuts keyword tensors into the same microbatches as the inputs and passes them to every
stage's forward. A forward pre-hook on each stage turns a microbatch's token ids into its masks
(the model's own ``attention_masks``), so the stage's forward receives exactly what the model
receives without pipeline parallel.
"""

from __future__ import annotations

from typing import Any

from torch import nn

INPUT_BATCH = "input_batch"
"""The schedule keyword that carries a microbatch's token ids to every stage."""


def needs_input_batch(model: nn.Module) -> bool:
    """Whether the meta ``model`` has layers whose masks depend on the token ids (documents)."""
    return bool(model.needs_documents())


def build_masks_from_input_batch(part: nn.Module, *, eos_id: int | None) -> Any:
    """Make the stage ``part`` build its attention masks from the ``input_batch`` keyword (the
    microbatch's token ids, ended at ``eos_id``); returns the hook's handle."""

    def masks(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """Replace the microbatch's token ids by the masks built from them."""
        if INPUT_BATCH not in kwargs:
            return None
        kwargs = dict(kwargs)
        tokens = kwargs.pop(INPUT_BATCH)
        kwargs["attention_masks"] = part.attention_masks(tokens, eos_id=eos_id)
        return args, kwargs

    return part.register_forward_pre_hook(masks, with_kwargs=True)


__all__ = ["INPUT_BATCH", "build_masks_from_input_batch", "needs_input_batch"]
