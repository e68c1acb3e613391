"""Hugging Face safetensors: the last-step export and the initial import, model only.

Both go through the full (unsharded) state dict on rank 0's CPU, so a state-dict adapter only
ever renames and reshapes plain tensors, whatever the parallelism; the cost is one copy of the
model in rank 0's host memory, once per run. Under pipeline parallel rank 0 holds only its own
stages: the export gathers every stage's tensors on rank 0, which still writes every file, and
the import reads on each rank its own stages' tensors (``titan.components.checkpoint.hf_stages``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.distributed as dist

from titan.components.checkpoint.errors import CheckpointError
from titan.components.checkpoint.hf_files import Origins, check_floating, shard_files
from titan.components.checkpoint.hf_stages import gathered_state_dict, load_own_stages, stage_keys
from titan.components.checkpoint.state import ModelState, cast, check_model_keys
from titan.components.run_files import open_run_file

WEIGHTS = "model.safetensors"
CONFIG = "config.json"


def write_hf(
    path: str,
    model_state: ModelState,
    *,
    sd_adapter: Any,
    dtype: torch.dtype,
    config_json: dict[str, Any] | None,
) -> None:
    """Write the model as Hugging Face safetensors (+ ``config.json``) into folder ``path``.

    Called on every rank (gathering the full state dict is a collective, every stage's under
    pipeline parallel); rank 0 writes. When
    the adapter knows the shard layout of the checkpoint it was built from
    (``fqn_to_index_mapping``), the export keeps it, with a ``model.safetensors.index.json``.
    """
    from safetensors.torch import save_file

    stages = stage_keys(model_state)
    if stages is None:
        full = model_state.full_state_dict()
    else:
        full = gathered_state_dict(model_state, stages)
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    try:
        hf = sd_adapter.to_hf(full)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"the state-dict adapter cannot export this model: {exc}") from None
    hf = _unshared({key: cast(value, dtype).contiguous() for key, value in hf.items()})
    weights = getattr(sd_adapter, "weights_file", WEIGHTS)
    files = _shard_files(hf, getattr(sd_adapter, "fqn_to_index_mapping", None), weights=weights)
    for name, keys in files.items():
        save_file({key: hf[key] for key in keys}, os.path.join(path, name), {"format": "pt"})
    if len(files) > 1:
        weight_map = {key: name for name, keys in files.items() for key in keys}
        total = sum(value.numel() * value.element_size() for value in hf.values())
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        _write_json(os.path.join(path, f"{weights}.index.json"), index)
    if config_json is not None:
        config = dict(config_json)
        if "torch_dtype" in config:
            config["torch_dtype"] = str(dtype).removeprefix("torch.")
        _write_json(os.path.join(path, CONFIG), config)


def load_hf(path: str, model_state: ModelState, *, sd_adapter: Any) -> None:
    """Load every ``*.safetensors`` file in folder ``path`` into the model, through the adapter.

    Rank 0 reads and checks; every rank learns the verdict before the weights are scattered, so
    a wrong folder is one clear error everywhere instead of a hang. Under pipeline parallel
    every rank reads its own stages' tensors instead.
    """
    stages = stage_keys(model_state)
    if stages is not None:
        load_own_stages(path, model_state, stages, sd_adapter=sd_adapter)
        return
    distributed = dist.is_available() and dist.is_initialized()
    state: dict[str, Any] = {}
    error: str | None = None
    if not distributed or dist.get_rank() == 0:
        try:
            state = _read(path, model_state, sd_adapter=sd_adapter)
        except CheckpointError as exc:
            error = str(exc)
    if distributed:
        verdict = [error]
        dist.broadcast_object_list(verdict, src=0)
        error = verdict[0]
    if error is not None:
        raise CheckpointError(error)
    model_state.load_full_state_dict(state)


def _read(path: str, model_state: ModelState, *, sd_adapter: Any) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    hf: dict[str, Any] = {}
    origins = Origins()
    for file in shard_files(path):
        try:
            tensors = load_file(file)
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{file} is not a readable safetensors file: {exc}") from None
        for key, value in tensors.items():
            origins.add(key, file=file, dtype=value.dtype)
        hf.update(tensors)
    try:
        state = sd_adapter.from_hf(hf)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"{path} does not match this model: {exc}") from None
    model = model_state.state_dict()
    check_model_keys(path, model, {key: list(value.shape) for key, value in state.items()})
    unexpected = sorted(set(state) - set(model))
    if unexpected:
        raise CheckpointError(
            f"{path} has {len(unexpected)} tensors this model lacks, e.g. {unexpected[:3]}"
        )
    check_floating(model, state, origins=origins, sd_adapter=sd_adapter)
    return state


def _shard_files(
    hf: dict[str, Any], mapping: dict[str, int] | None, *, weights: str = WEIGHTS
) -> dict[str, list[str]]:
    """File name → keys: one ``weights`` file, or the adapter's numbered shards named after it."""
    if not mapping or not set(hf) <= set(mapping):
        return {weights: list(hf)}
    count = max(mapping[key] for key in hf)
    stem = weights.removesuffix(".safetensors")
    files: dict[str, list[str]] = {}
    for key in hf:
        files.setdefault(f"{stem}-{mapping[key]:05d}-of-{count:05d}.safetensors", []).append(key)
    return files


def _unshared(tensors: dict[str, Any]) -> dict[str, Any]:
    """safetensors refuses two keys on one storage (tied weights); give each its own copy."""
    seen: set[int] = set()
    result = {}
    for key, value in tensors.items():
        pointer = value.untyped_storage().data_ptr()
        result[key] = value.clone() if pointer in seen else value
        seen.add(pointer)
    return result


def _write_json(path: str, data: dict[str, Any]) -> None:
    # Into the save's own new folder; never through a link (titan.components.run_files).
    fd = open_run_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=2)
        file.write("\n")
