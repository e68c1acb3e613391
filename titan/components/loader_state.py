"""The saved state of a data loader that shares its data over data-parallel ranks.

Every rank saves its position under its own key, beside the number of ranks it was saved with
(torchtitan's layout)::

    {"dp_rank_0": b"...", "world_size": 2}

A position only means something for the same sharing of the data, so a state saved with another
number of ranks, or without this rank's key, is refused with a message that says what to do.
Torch-free.
"""

from __future__ import annotations

from typing import Any

WORLD_SIZE_KEY = "world_size"


def rank_key(dp_rank: int) -> str:
    """The key of data-parallel rank ``dp_rank``'s position."""
    return f"dp_rank_{dp_rank}"


def rank_state(position: bytes, *, dp_rank: int, dp_world_size: int) -> dict[str, Any]:
    """The state to save: this rank's ``position`` and the number of ranks."""
    return {rank_key(dp_rank): position, WORLD_SIZE_KEY: dp_world_size}


def saved_position(
    state_dict: dict[str, Any], *, dp_rank: int, dp_world_size: int, error: type[Exception]
) -> bytes | None:
    """This rank's saved position; None for an empty state (nothing saved, start afresh).

    A state this rank cannot resume from raises ``error`` with the reason.
    """
    if not state_dict:
        return None
    saved_world_size = state_dict.get(WORLD_SIZE_KEY)
    if saved_world_size != dp_world_size:
        raise error(
            f"the data-loader state was saved with {saved_world_size} data-parallel ranks "
            f"but this run has {dp_world_size}; its data is shared out differently, so the "
            "position cannot be resumed: keep the dp degree, or start the data from the "
            "beginning (checkpoint.exclude_from_loading = ['dataloader'])"
        )
    key = rank_key(dp_rank)
    if key not in state_dict:
        saved = sorted(k for k in state_dict if k != WORLD_SIZE_KEY)
        raise error(f"the data-loader state has no position for {key} (it has {saved})")
    position = state_dict[key]
    if not isinstance(position, bytes | bytearray):
        raise error(f"the data-loader state of {key} is not bytes")
    return bytes(position)
