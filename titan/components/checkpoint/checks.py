"""The checkpoint refusals a run meets before its first step, read from the settings and the
folder alone (no checkpoint is read), so that ``titan-train --preflight`` and the run's setup
find them with the manager's own words: settings that cannot work together, ``load_step`` or a
seed checkpoint that cannot be honoured, and a checkpoint folder that is not what ``load`` and
the first save need. Torch-free.
"""

from __future__ import annotations

import os
from typing import Any

from titan.components.checkpoint.errors import CheckpointError

SEED_NEEDS_SAVING = (
    "a seed checkpoint needs checkpoint.enable = true and checkpoint.load_only = false"
)


def load_when_disabled(step: int) -> str:
    """The refusal of ``checkpoint.load_step = step`` with checkpointing off."""
    return (
        f"checkpoint.load_step = {step}, but checkpoint.enable is false; enable checkpointing "
        "to load a checkpoint"
    )


def seed_world_size_problem(world_size: int) -> str | None:
    """Why a seed checkpoint cannot be made by ``world_size`` processes, else None."""
    if world_size == 1:
        return None
    return (
        "checkpoint.create_seed_checkpoint builds the unsharded model: run it as one process, "
        f"not {world_size}"
    )


def check_start(config: Any, *, world_size: int) -> None:
    """The refusals a run meets when it starts (``load``, the seed checkpoint) that depend on
    the settings alone: a ``load_step`` with checkpointing off, a seed checkpoint made by
    several processes or by a run that does not save."""
    if not config.enable and config.load_step != -1:
        raise CheckpointError(load_when_disabled(config.load_step))
    if config.create_seed_checkpoint:
        problem = seed_world_size_problem(world_size)
        if problem is not None:
            raise ValueError(problem)
        if not config.enable or config.load_only:
            raise CheckpointError(SEED_NEEDS_SAVING)


def check_folder(config: Any, *, dump_folder: str, sd_adapter: Any) -> None:
    """What ``load`` would refuse in the checkpoint folder, read-only: a checkpoint folder
    that is a file, a ``step-N`` entry that is not a checkpoint folder, a ``load_step`` it does
    not hold, an initial load source that is missing. The checkpoint itself is not read."""
    if not config.enable:
        return
    from titan.components.checkpoint.folders import CheckpointFolders
    from titan.components.checkpoint.initial import check_initial_source
    from titan.components.checkpoint.resume import choose, not_checkpoints, not_folders

    folders = CheckpointFolders(os.path.join(dump_folder, config.folder))
    problem = folders.root_problem()
    if problem is not None:
        raise CheckpointError(problem)
    if any(path.endswith(".replaced") for path in folders.incomplete_paths()):
        # A publish cut short by a crash: which steps exist is settled when ``load`` finishes
        # it, so only what does not depend on that is checked here.
        if folders.not_folders():
            raise CheckpointError(not_folders(folders, folders.not_folders()))
        if folders.unloadable_steps():
            raise CheckpointError(not_checkpoints(folders, folders.unloadable_steps()))
        return
    point = choose(folders, load_step=config.load_step)
    if point.error is not None:
        raise CheckpointError(point.error)
    if point.step is None and (config.initial_load_path or config.initial_load_in_hf):
        check_initial_source(config, sd_adapter=sd_adapter)


def check_settings(config: Any, *, states: Any, sd_adapter: Any) -> None:
    """Refuse checkpoint settings that cannot work together (torchtitan's checks, as
    ``CheckpointError``s); ``states`` names the checkpointed states."""
    _check(config, states=dict.fromkeys(states), sd_adapter=sd_adapter)


def _check(config: Any, *, states: dict[str, Any], sd_adapter: Any) -> None:
    """Refuse settings that cannot work together (torchtitan's checks, as CheckpointErrors)."""
    problems = []
    if config.keep_latest_k == 1 or config.keep_latest_k < 0:
        problems.append("checkpoint.keep_latest_k must be 0 (keep all) or at least 2")
    if config.interval < 1:
        problems.append("checkpoint.interval must be at least 1")
    unknown = sorted(set(config.exclude_from_loading) - set(states))
    if unknown:
        problems.append(
            f"checkpoint.exclude_from_loading names {unknown}, which are not checkpointed; "
            f"choose from {sorted(states)}"
        )
    if config.initial_load_in_hf and not config.initial_load_model_only:
        problems.append("checkpoint.initial_load_in_hf loads the model only")
    if config.initial_load_in_hf and sd_adapter is None:
        problems.append("checkpoint.initial_load_in_hf needs a model with a state-dict adapter")
    if config.initial_load_in_hf_quantized:
        problems.append("checkpoint.initial_load_in_hf_quantized is not supported by titan-train")
    if config.last_save_in_hf and not config.load_only:
        if sd_adapter is None:
            problems.append("checkpoint.last_save_in_hf needs a model with a state-dict adapter")
        if not config.last_save_model_only:
            problems.append("checkpoint.last_save_in_hf saves the model only")
    if problems:
        raise CheckpointError("; ".join(problems))
