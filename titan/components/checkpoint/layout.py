"""What a checkpoint's keys tell of the layout it was saved with, and the refusal of a resume
whose data-parallel layout differs.

Each data-parallel rank saves its data position under its own key (``dataloader.dp_rank_<r>``,
see ``titan.components.loader_state``) and each process its RNG (``rng.rank_<r>.*``), so the
index alone says how many data-parallel ranks and processes saved it. A run with another
data-parallel degree finds positions that are not its own: the checkpoint is intact, only the
way the data is shared out changed. Every rank reaches the same verdict from the same index, so
all of them stop before any collective. Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from titan.components.loader_state import WORLD_SIZE_KEY

DATALOADER = "dataloader"
LOADER_RANK = re.compile(rf"{DATALOADER}\.dp_rank_(\d+)")
RNG_RANK = re.compile(r"rng\.rank_(\d+)\..+")


def saved_dp_ranks(names: Iterable[str]) -> list[int]:
    """The data-parallel ranks whose data position the checkpoint holds."""
    return sorted({int(m.group(1)) for name in names if (m := LOADER_RANK.fullmatch(name))})


def saved_processes(names: Iterable[str]) -> int:
    """How many processes saved the checkpoint (titan saves every rank's RNG); 0: unknown."""
    return len({m.group(1) for name in names if (m := RNG_RANK.fullmatch(name))})


def data_layout_change(
    path: str, names: Iterable[str], loader_state: Any, *, world_size: int
) -> str | None:
    """Why the data positions in checkpoint ``path`` (whose index has ``names``) cannot resume
    a data loader whose state now is ``loader_state``, on ``world_size`` processes; None when
    they can (or when the loader does not share its data by data-parallel rank)."""
    if not isinstance(loader_state, dict) or WORLD_SIZE_KEY not in loader_state:
        return None
    names = list(names)
    ranks, dp_now = saved_dp_ranks(names), loader_state[WORLD_SIZE_KEY]
    if not ranks or ranks == list(range(dp_now)):
        return None
    processes = saved_processes(names)
    by = f" by {_count(processes, 'process')}" if processes else ""
    keys = ", ".join(f"dp_rank_{rank}" for rank in ranks)
    return (
        f"{path} was saved{by} with {_count(len(ranks), 'data-parallel rank')} ({keys}), and "
        f"this run has {_count(dp_now, 'data-parallel rank')} on {_count(world_size, 'process')}. "
        "The checkpoint is intact: only the data-parallel layout changed, and each "
        "data-parallel rank resumes its own share of the data, so the saved data positions do "
        "not fit this run. Resume with the data-parallel degree it was saved with "
        f"({len(ranks)}: processes / (pipeline x tensor x context parallel degrees) = "
        "parallelism.data_parallel_replicate_degree x data_parallel_shard_degree), or resume "
        "everything but the data position with checkpoint.exclude_from_loading = ['dataloader'] "
        "(--checkpoint.exclude_from_loading dataloader), which starts the data from its beginning"
    )


def _count(number: int, noun: str) -> str:
    plural = "es" if noun.endswith("s") else "s"
    return f"{number} {noun}{'' if number == 1 else plural}"
