"""A seed checkpoint is the unsharded model, made by one process: its run takes the layout of
one process whatever the config's parallel degrees, so one config makes the seed and then trains
from it on any number of ranks (a checkpoint's keys are the model's under every layout).

torchtitan asked for the degrees to be set to 1 on the command line of the seed run; titan sets
them itself, and says which ones it set.
"""

from __future__ import annotations

from typing import Any

ONE_PROCESS: dict[str, tuple[Any, ...]] = {
    "parallelism.data_parallel_replicate_degree": (1,),
    "parallelism.data_parallel_shard_degree": (1, -1),
    "parallelism.tensor_parallel_degree": (1,),
    "parallelism.enable_async_tensor_parallel": (False,),
    "parallelism.pipeline_parallel_degree": (1,),
    "parallelism.module_fqns_per_model_part": (None,),
    "parallelism.pipeline_parallel_layers_per_stage": (None,),
    "parallelism.pipeline_parallel_schedule_csv": ("", None),
    "parallelism.context_parallel_degree": (1,),
    "parallelism.expert_parallel_degree": (1,),
    "parallelism.expert_tensor_parallel_degree": (1,),
    "training.global_batch_size": (-1,),
}
"""Each setting a seed run overrides → the values of one process without parallelism (the
first is the one it sets; any of them is left as it is)."""


def is_seed_run(config: Any, *, world_size: int | None) -> bool:
    """Whether ``config`` makes a seed checkpoint in one process (``world_size`` 1)."""
    checkpoint = getattr(config, "checkpoint", None)
    return world_size == 1 and bool(getattr(checkpoint, "create_seed_checkpoint", False))


def one_process_layout(config: Any) -> list[str]:
    """Set ``config``'s parallel settings to one process's (:data:`ONE_PROCESS`); returns what
    was changed, as ``key = old -> new``."""
    changed = []
    for key, values in ONE_PROCESS.items():
        section, name = key.split(".")
        owner = getattr(config, section)
        old = getattr(owner, name)
        if old not in values:
            setattr(owner, name, values[0])
            changed.append(f"{key} = {old!r} -> {values[0]!r}")
    return changed


__all__ = ["ONE_PROCESS", "is_seed_run", "one_process_layout"]
