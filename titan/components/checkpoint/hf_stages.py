"""Hugging Face safetensors under pipeline parallel, where each rank holds only its own stages.

The export gathers every stage's tensors on rank 0, which writes the files: each set of ranks
that holds the same stages (the data- and tensor-parallel ranks of one pipeline rank) unshards
its tensors together, the first of them sends them to rank 0 on the CPU, and the others send
nothing, so rank 0's host memory holds one copy of the model, as without pipeline parallel.

The import reads on every rank only the Hugging Face tensors of its own stages (the adapter's
``to_hf`` of the stage's keys names them), as torchtitan does; the tensors the whole model lacks
are found from the files' headers alone. Every rank learns every rank's verdict before any
weight is loaded, so a wrong folder is one clear error everywhere instead of a hang.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from titan.components.checkpoint.errors import CheckpointError
from titan.components.checkpoint.hf_files import Origins, check_floating, shard_files
from titan.components.checkpoint.state import ModelState, check_model_keys


@dataclasses.dataclass(frozen=True)
class StageKeys:
    """Which model keys this rank holds, and every rank's."""

    own: tuple[str, ...]
    """This rank's keys (its stages'), sorted."""
    ranks: list[tuple[str, ...]]
    """Every rank's keys, by rank."""

    @property
    def lead(self) -> bool:
        """Whether this rank is the first of those holding its stages (the one that sends)."""
        return self.ranks.index(self.own) == dist.get_rank()

    @property
    def model(self) -> set[str]:
        """Every key of the whole model."""
        return {key for keys in self.ranks for key in keys}


def stage_keys(model_state: ModelState) -> StageKeys | None:
    """Every rank's model keys when the ranks hold different ones (pipeline stages), else None
    (one process, or every rank holds the whole model, sharded or not). A collective."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    own = tuple(sorted(model_state.state_dict()))
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, own)
    if all(keys == own for keys in ranks):
        return None
    return StageKeys(own=own, ranks=[tuple(keys) for keys in ranks])


def gathered_state_dict(model_state: ModelState, keys: StageKeys) -> dict[str, Any]:
    """The whole model's unsharded tensors on rank 0's CPU (other ranks get an empty dict)."""
    local: dict[str, torch.Tensor] = {}
    lead = keys.lead
    for key, value in model_state.state_dict().items():
        # Unsharding is a collective of the ranks that hold this stage: all of them take part.
        full = value.full_tensor() if isinstance(value, DTensor) else value
        if lead:
            local[key] = full.detach().to("cpu", copy=True)
    gathered: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(local, gathered, dst=0)
    if gathered is None:
        return {}
    return {key: value for part in gathered for key, value in part.items()}


def load_own_stages(
    path: str, model_state: ModelState, keys: StageKeys, *, sd_adapter: Any
) -> None:
    """Load the tensors of this rank's stages from the safetensors in folder ``path``."""
    state: dict[str, Any] = {}
    error: str | None = None
    try:
        state = _read_own(path, model_state, keys, sd_adapter=sd_adapter)
    except CheckpointError as exc:
        error = str(exc)
    verdicts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(verdicts, error)
    found = next((verdict for verdict in verdicts if verdict is not None), None)
    if found is not None:
        raise CheckpointError(found)
    model_state.load_own_full_state_dict(state)


def _read_own(
    path: str, model_state: ModelState, keys: StageKeys, *, sd_adapter: Any
) -> dict[str, Any]:
    """This rank's tensors, checked: the files hold them with the model's shapes, and hold no
    tensor the whole model lacks."""
    from safetensors import SafetensorError, safe_open

    files = shard_files(path)
    own = model_state.state_dict()
    try:
        needed = set(sd_adapter.to_hf({key: _meta(value) for key, value in own.items()}))
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"the state-dict adapter cannot import this model: {exc}") from None
    headers: dict[str, torch.Tensor] = {}
    hf: dict[str, Any] = {}
    origins = Origins()
    for file in files:
        try:
            with safe_open(file, framework="pt") as reader:
                for key in reader.keys():
                    piece = reader.get_slice(key)
                    dtype = piece.get_dtype()
                    origins.add(key, file=file, dtype=_DTYPES.get(dtype, dtype))
                    headers[key] = torch.empty(
                        piece.get_shape(), dtype=_DTYPES.get(piece.get_dtype()), device="meta"
                    )
                    if key in needed:
                        hf[key] = reader.get_tensor(key)
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{file} is not a readable safetensors file: {exc}") from None
    try:
        whole = sd_adapter.from_hf(headers)
        state = sd_adapter.from_hf(hf)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"{path} does not match this model: {exc}") from None
    try:
        check_model_keys(path, own, {key: list(value.shape) for key, value in state.items()})
    except CheckpointError as error:
        raise CheckpointError(
            f"{error} (the pipeline stages that read them hold {len(own)} of the model's "
            f"{len(keys.model)} tensors)"
        ) from None
    unexpected = sorted(set(whole) - keys.model)
    if unexpected:
        raise CheckpointError(
            f"{path} has {len(unexpected)} tensors this model lacks, e.g. {unexpected[:3]}"
        )
    check_floating(own, state, origins=origins, sd_adapter=sd_adapter)
    return {key: value for key, value in state.items() if key in own}


def _meta(value: Any) -> torch.Tensor:
    """A tensor of ``value``'s full shape and dtype that holds no data."""
    return torch.empty(value.shape, dtype=value.dtype, device="meta")


# safetensors' dtype names (``get_dtype``) → torch's; an unknown one reads as float32, which is
# only used for the shapes of the header pass.
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}

__all__ = ["StageKeys", "gathered_state_dict", "load_own_stages", "stage_keys"]
