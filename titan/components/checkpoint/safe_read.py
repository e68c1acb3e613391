"""Reading a DCP checkpoint without letting it run code.

DCP stores two kinds of pickles: the folder's ``.metadata`` (the index: which tensor sits in which
file, with its shape and dtype) and, inside the ``__<rank>_0.distcp`` files, every entry that is
not a tensor (the optimizer's hyper-parameters, the LR schedule, the data position, the step, the
Python RNG). torch reads the first with the full unpickler and the second with
``torch.load(weights_only=False)``, so a planted file could run any command the moment a run
resumes from it. titan hands DCP its own reader and planner instead:

- ``.metadata`` goes through ``MetadataUnpickler``, which admits only the classes DCP's index is
  made of (``METADATA_CLASSES``, torch's dtypes, layouts and memory formats, ``pathlib`` paths);
  anything else is refused with the file and the class it asked for, before torch reads the
  folder. The files it names must lie in the folder itself.
- every non-tensor entry is read with ``torch.load(weights_only=True)``, torch's restricted
  unpickler (plain values and tensors; the tensors themselves DCP already reads that way).

Both refusals are ``UnsafeCheckpoint`` errors; nothing of the refused pickle runs.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, ReadItem

from titan.components.checkpoint.errors import (
    CheckpointError,
    DamagedCheckpoint,
    UnsafeCheckpoint,
)
from titan.components.checkpoint.folders import DCP_METADATA

_DCP = "torch.distributed.checkpoint"
METADATA_CLASSES = frozenset(
    {
        *(
            (f"{_DCP}.metadata", name)
            for name in (
                "Metadata",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "TensorProperties",
                "MetadataIndex",
                "StorageMeta",
                "_MEM_FORMAT_ENCODING",
            )
        ),
        (f"{_DCP}.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        *(
            (module, name)
            for module in ("pathlib", "pathlib._local")
            for name in ("Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
        ),
    }
)
"""(module, name) of every class a DCP ``.metadata`` file is built from (torch 2.13's
``metadata.py`` and ``filesystem.py``: the index, its tensor and bytes entries, their chunks and
properties, the per-file storage info, and the save's ``checkpoint_id`` path)."""

TORCH_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format)
"""``torch.<name>`` values a ``.metadata`` names by reference (``torch.float32``)."""

UNSAFE_WHY = (
    "titan does not unpickle it, since loading what it names could run code; a checkpoint "
    "torch.distributed.checkpoint wrote never needs it, so this file was made or changed by "
    "hand. If you did not make it, do not load it with torch either"
)


class RefusedPickle(pickle.UnpicklingError):
    """A pickle asked for something ``MetadataUnpickler`` does not admit (named in the message)."""


class MetadataUnpickler(pickle.Unpickler):
    """The unpickler of a ``.metadata`` file: only ``METADATA_CLASSES`` and torch constants."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in METADATA_CLASSES or _is_torch_constant(module, name):
            return super().find_class(module, name)
        raise RefusedPickle(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("a persistent reference")


def _is_torch_constant(module: str, name: str) -> bool:
    return (
        module == "torch"
        and name.isidentifier()
        and isinstance(getattr(torch, name, None), TORCH_CONSTANTS)
    )


def read_metadata_file(path: str) -> Metadata:
    """The DCP index in file ``path``, read with ``MetadataUnpickler``.

    ``UnsafeCheckpoint`` when it needs anything else or names a file outside its folder;
    ``DamagedCheckpoint`` when it cannot be read at all (truncated, not a pickle).
    """
    try:
        with open(path, "rb") as file:
            metadata = MetadataUnpickler(file).load()
    except RefusedPickle as refused:
        raise UnsafeCheckpoint(f"{path} asks for {refused} when unpickled: {UNSAFE_WHY}") from None
    except Exception as exc:
        raise DamagedCheckpoint(
            f"{path} cannot be read ({type(exc).__name__}: {exc}); the checkpoint is damaged or "
            "was written by an incompatible torch"
        ) from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise DamagedCheckpoint(
            f"{path} is not a DCP checkpoint index (it holds a {type(metadata).__name__}); the "
            "checkpoint is damaged"
        )
    _check_files(path, metadata)
    return metadata


def _check_files(path: str, metadata: Metadata) -> None:
    """Refuse an index whose entries point at files outside its own folder."""
    for info in (metadata.storage_data or {}).values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            raise UnsafeCheckpoint(
                f"{path} names the data file {name!r}, which is not a file of its own folder; "
                "titan reads a checkpoint's files from its folder only, so this index was made "
                "or changed by hand"
            )


class SafeReader(FileSystemReader):
    """DCP's file-system reader with the index read by ``read_metadata_file``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = DCP_METADATA if rank is None else f"__{rank}{DCP_METADATA}"
        metadata = read_metadata_file(os.path.join(os.fspath(self.path), name))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafePlanner(DefaultLoadPlanner):
    """DCP's load planner, reading every non-tensor entry with torch's restricted unpickler."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def create_local_plan(self) -> LoadPlan:
        """DCP's plan; a key the checkpoint lacks is a different setup, not damage."""
        try:
            return super().create_local_plan()
        except RuntimeError as exc:
            found = re.match(r"Missing key in checkpoint state_dict: (.+?)\.?$", str(exc))
            if found is None:
                raise
            raise CheckpointError(
                f"{self.folder} holds no entry {found.group(1)!r}, which this run loads: the "
                "checkpoint is intact but was saved by a run set up differently; resume with "
                "the settings it was saved with, or leave that state out with "
                "checkpoint.exclude_from_loading"
            ) from None

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            loaded = torch.load(value, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise UnsafeCheckpoint(self._refusal(read_item, exc)) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded

    def _refusal(self, read_item: ReadItem, exc: Exception) -> str:
        """The message for an entry that needs more than plain values and tensors."""
        info = self.metadata.storage_data.get(read_item.storage_index) if self.metadata else None
        where = os.path.join(self.folder, info.relative_path) if info else self.folder
        found = re.search(r"GLOBAL (\S+)", str(exc))
        asks = found.group(1) if found else "something other than plain values and tensors"
        return (
            f"{where}: its entry {read_item.dest_index.fqn!r} asks for {asks} when unpickled; "
            "a checkpoint's non-tensor entries hold only numbers, strings, bytes, lists, dicts "
            f"and tensors. {UNSAFE_WHY}"
        )
