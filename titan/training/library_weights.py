"""Full weights of a (possibly sharded) model, for a generator or an export in memory."""

from __future__ import annotations

from typing import Any

import torch

# Wrappers whose name segment DCP leaves out of its keys (activation checkpointing, compile).
WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_orig_mod.")


def canonical_name(name: str) -> str:
    """``name`` without the wrapper segments, as ``get_model_state_dict`` writes keys."""
    for segment in WRAPPER_SEGMENTS:
        name = name.replace(segment, "")
    return name


def full_state_dict(parts: Any, *, dtype: torch.dtype | None, hf_names: bool) -> dict[str, Any]:
    """Every rank's copy of the whole model state dict (FSDP / TP / EP shards gathered).

    ``dtype`` casts floating-point parameters only: buffers keep their dtype. ``hf_names``
    renames through the checkpointer's Hugging Face state-dict adapter.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from titan.training.step_api import TrainerUsageError

    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TrainerUsageError(
            f"model_state_dict: dtype must be a floating torch.dtype, not {dtype!r}"
        )
    adapter = getattr(parts.checkpointer, "sd_adapter", None)
    if hf_names and adapter is None:
        raise TrainerUsageError(
            "model_state_dict(hf_names=True): this model family has no Hugging Face "
            "state-dict adapter"
        )
    buffers = {
        canonical_name(name) for part in parts.model_parts for name, _ in part.named_buffers()
    }
    # Without cpu_offload every rank receives the gathered tensors (with it, only rank 0 would).
    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    state: dict[str, Any] = {}
    for part in parts.model_parts:
        state.update(get_model_state_dict(part, options=options))
    if dtype is not None:
        state = {
            name: value if name in buffers or not value.is_floating_point() else value.to(dtype)
            for name, value in state.items()
        }
    return adapter.to_hf(state) if hf_names else state


__all__ = ["canonical_name", "full_state_dict"]
