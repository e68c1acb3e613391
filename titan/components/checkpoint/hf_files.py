"""Which files a Hugging Face import reads, checked before any of them is opened.

A folder of safetensors looks like::

    DIR/
      model-00001-of-00002.safetensors      every *.safetensors file is read
      model-00002-of-00002.safetensors
      model.safetensors.index.json          optional: key -> shard; every shard it names exists

Each shard must be a regular file (or a link to one): a FIFO would block the reader forever
(past SIGTERM), a directory or a dangling link cannot be read. The index may only name files
inside the folder. A key that two shards both hold would silently take the later file's value,
so it is refused, naming both files; so is a tensor whose dtype cannot hold the model's
floating-point parameter (an integer or bool tensor would be cast and trained).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import torch

from titan.components import asset_files
from titan.components.checkpoint.errors import CheckpointError

INDEX_SUFFIX = ".safetensors.index.json"


def shard_files(path: str) -> list[str]:
    """The ``*.safetensors`` files of folder ``path``, sorted, each checked to be a regular
    file; the folder's index, when there is one, names only files that are there."""
    files = sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors")))
    if not files:
        raise CheckpointError(
            f"{path} holds no *.safetensors files; checkpoint.initial_load_in_hf is set, turn it "
            "off to load a DCP checkpoint"
        )
    for file in files:
        problem = not_regular(file)
        if problem is not None:
            raise CheckpointError(f"{file} {problem}; remove it or replace it with the file")
    for index in sorted(glob.glob(os.path.join(glob.escape(path), "*" + INDEX_SUFFIX))):
        _check_index(index, files)
    return files


def not_regular(file: str) -> str | None:
    """Why ``file`` cannot be read as a file without opening it (never blocks), else None."""
    found = asset_files.kind(file)
    if found == asset_files.FILE:
        return None
    if found == asset_files.MISSING:
        return "is a link to a file that does not exist"
    if found.startswith("unreadable"):
        return f"cannot be read{found.removeprefix('unreadable')}"
    return f"is {found}, not a safetensors file"


def _check_index(index: str, files: list[str]) -> None:
    """The shards ``index`` maps keys to are plain names of files in its folder."""
    problem = not_regular(index)
    if problem is not None:
        raise CheckpointError(f"{index} {problem}")
    try:
        with open(index, encoding="utf-8") as handle:
            weight_map = json.load(handle).get("weight_map", {})
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{index} is not a readable safetensors index: {exc}") from None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: its weight_map is not a table of key -> file name")
    present = {os.path.basename(file) for file in files}
    for key, name in sorted(weight_map.items()):
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            raise CheckpointError(
                f"{index} maps {key!r} to {name!r}, which is not a file of its own folder"
            )
        if name not in present:
            raise CheckpointError(
                f"{index} maps {key!r} to {name}, which is not in {os.path.dirname(index)} "
                f"(it holds {sorted(present)}); is the download incomplete?"
            )


class Origins:
    """Which shard each Hugging Face tensor came from, and its dtype; refuses a key held by
    two shards."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.dtypes: dict[str, torch.dtype | str] = {}

    def add(self, key: str, *, file: str, dtype: torch.dtype | str) -> None:
        """Record ``key`` as read from ``file``."""
        first = self.files.get(key)
        if first is not None:
            raise CheckpointError(
                f"tensor {key!r} is in both {first} and {file}; a folder holds each tensor "
                "once: remove the file that does not belong to this checkpoint"
            )
        self.files[key] = file
        self.dtypes[key] = dtype


def check_floating(
    model: dict[str, Any], state: dict[str, Any], *, origins: Origins, sd_adapter: Any
) -> None:
    """Refuse a non-floating tensor loaded into a floating-point parameter (it would be cast
    and trained), naming the Hugging Face tensor, its dtype and its file."""
    for key, value in state.items():
        target = model.get(key)
        if target is None or not torch.is_floating_point(target):
            continue
        if not isinstance(value, torch.Tensor) or torch.is_floating_point(value):
            continue
        names = _hf_names(key, target, origins=origins, sd_adapter=sd_adapter)
        found = ", ".join(
            f"{name!r} ({_dtype_name(origins.dtypes[name])}) in {origins.files[name]}"
            for name in names
        )
        raise CheckpointError(
            f"{found or repr(key)} is not a floating-point tensor, but the model's {key!r} is "
            f"{_dtype_name(target.dtype)}; the weights would be cast and trained: use a "
            "checkpoint that stores its weights in a floating-point dtype"
        )


def _hf_names(key: str, target: Any, *, origins: Origins, sd_adapter: Any) -> list[str]:
    """The non-floating Hugging Face tensors that became model key ``key``."""
    wrong = [name for name, dtype in origins.dtypes.items() if not _floating(dtype)]
    try:
        meta = torch.empty(target.shape, dtype=target.dtype, device="meta")
        mapped = set(sd_adapter.to_hf({key: meta}))
    except Exception:  # noqa: BLE001 - an adapter that cannot map one key: name every candidate
        return wrong
    return [name for name in wrong if name in mapped] or wrong


def _floating(dtype: torch.dtype | str) -> bool:
    """Whether a torch dtype, or a safetensors dtype name, is a floating-point one."""
    if isinstance(dtype, torch.dtype):
        return dtype.is_floating_point
    return dtype.startswith(("F", "BF"))


def _dtype_name(dtype: torch.dtype | str) -> str:
    """A dtype in the user's words (``int32``, ``float32``)."""
    return str(dtype).removeprefix("torch.")
