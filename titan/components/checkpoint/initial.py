"""The initial load: a new run's starting weights, from another run's checkpoint folder or from
Hugging Face safetensors (used only while the run's own checkpoint folder is empty)."""

from __future__ import annotations

import os
from typing import Any

from titan.components.checkpoint.errors import CheckpointError
from titan.components.checkpoint.hf import load_hf
from titan.components.checkpoint.hf_files import shard_files
from titan.components.checkpoint.state import load_dcp


def check_initial_source(config: Any, *, sd_adapter: Any) -> str:
    """The folder the initial load reads; ``CheckpointError`` when it is not a folder (or, for
    Hugging Face weights, when its shards are not files it can read without blocking)."""
    if config.initial_load_in_hf:
        path = config.initial_load_path or getattr(sd_adapter, "hf_assets_path", None)
        if not path or not os.path.isdir(path):
            raise CheckpointError(
                f"checkpoint.initial_load_in_hf: {path!r} is not a folder of safetensors; "
                "set checkpoint.initial_load_path to one"
            )
        shard_files(path)  # its shards are files, and its index names only files it holds
        return path
    path = config.initial_load_path
    assert path is not None
    if not os.path.isdir(path):
        what = "it is a file" if os.path.exists(path) else "it does not exist"
        raise CheckpointError(f"checkpoint.initial_load_path {path!r} is not a folder: {what}")
    return path


def initial_load(config: Any, *, states: dict[str, Any], sd_adapter: Any) -> tuple[str, str]:
    """Load ``config.initial_load_path`` (or the adapter's Hugging Face folder) into ``states``;
    returns (path, what was loaded)."""
    path = check_initial_source(config, sd_adapter=sd_adapter)
    if config.initial_load_in_hf:
        load_hf(path, states["model"], sd_adapter=sd_adapter)
        return path, "model weights (Hugging Face safetensors)"
    try:
        load_dcp(
            path,
            states,
            model_only=config.initial_load_model_only,
            exclude=config.exclude_from_loading,
            hint="; set checkpoint.initial_load_model_only to start from its weights alone",
        )
    except CheckpointError as error:
        raise CheckpointError(f"checkpoint.initial_load_path: {error}") from None
    return path, "model weights" if config.initial_load_model_only else "initial checkpoint"
