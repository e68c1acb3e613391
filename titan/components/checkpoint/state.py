"""What a checkpoint holds: the model as one Stateful, every rank's RNG, and loading it back.

The saved state dict keeps torchtitan's layout: the model's keys sit at the top level
(``layers.0.attention.wq.weight``), next to the ``optimizer``, ``lr_scheduler``, ``dataloader``
and ``train_state`` entries. A model-only
checkpoint (seed, last-step export) is the same dict without those entries, which is why one
can always be loaded as a model. titan adds ``rng.rank_<r>.*``: DCP keeps one copy of a
non-sharded value whose key is the same on every rank, so each rank's RNG needs its own key.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)

from titan.components.checkpoint.errors import CheckpointError, DamagedCheckpoint
from titan.components.checkpoint.folders import COMPLETE_NAME, DCP_METADATA
from titan.components.checkpoint.layout import DATALOADER, data_layout_change
from titan.components.checkpoint.safe_read import SafePlanner, SafeReader, read_metadata_file

log = logging.getLogger("titan")

MODEL = "model"
RNG = "rng"


class ModelState:
    """The model parts as one Stateful whose state dict has every part's keys."""

    def __init__(self, model_parts: list[nn.Module]) -> None:
        self.model_parts = list(model_parts)

    def state_dict(self) -> dict[str, Any]:
        """Parameters and persistent buffers, sharded as the model is (DTensors under FSDP/TP)."""
        merged: dict[str, Any] = {}
        for part in self.model_parts:
            merged.update(get_model_state_dict(part))
        return merged

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # With several parts each one takes only its own keys, so strictness is checked by
        # check_model_keys against the union instead.
        options = StateDictOptions(strict=len(self.model_parts) == 1)
        for part in self.model_parts:
            set_model_state_dict(part, dict(state_dict), options=options)

    def full_state_dict(self) -> dict[str, Any]:
        """Unsharded tensors on the CPU of rank 0; other ranks get an empty dict."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        merged: dict[str, Any] = {}
        for part in self.model_parts:
            merged.update(get_model_state_dict(part, options=options))
        return merged if _rank() == 0 else {}

    def load_full_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load unsharded tensors that only rank 0 holds, scattering them to every rank."""
        options = StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=_distributed(), strict=False
        )
        for part in self.model_parts:
            set_model_state_dict(part, dict(state_dict), options=options)

    def load_own_full_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load unsharded tensors that this rank holds itself (its pipeline stages' keys): each
        part takes its own and shards them as it is sharded."""
        options = StateDictOptions(full_state_dict=True, strict=False)
        for part in self.model_parts:
            own = get_model_state_dict(part)
            set_model_state_dict(
                part, {key: state_dict[key] for key in own if key in state_dict}, options=options
            )


class RNGState:
    """This rank's random generators: torch CPU, the current CUDA device, Python ``random``."""

    def __init__(self, *, kinds: set[str] | None = None) -> None:
        self.rank = _rank()
        self.kinds = kinds
        """Which generators to load; ``None`` means all (when saving)."""

    @property
    def key(self) -> str:
        return f"rank_{self.rank}"

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        # is_initialized: a CPU run must not create a CUDA context just to read a generator.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state()
        if self.kinds is not None:
            state = {kind: value for kind, value in state.items() if kind in self.kinds}
        return {self.key: state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = state_dict[self.key]
        if "torch" in state:
            torch.set_rng_state(state["torch"])
        if "python" in state:
            random.setstate(state["python"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"])


def saved_states(
    states: dict[str, Any], *, model_only: bool, dtype: torch.dtype | None = None
) -> dict[str, Any]:
    """The state dict one save writes, model keys at the top level (torchtitan's layout)."""
    model = states[MODEL].state_dict()
    if dtype is not None:
        model = {key: cast(value, dtype) for key, value in model.items()}
    if model_only:
        return model
    others = {key: value for key, value in states.items() if key != MODEL}
    others[RNG] = RNGState()
    clash = sorted(set(model) & set(others))
    if clash:
        raise CheckpointError(f"model keys {clash} clash with checkpoint entries of that name")
    return {**model, **others}


def cast(value: Any, dtype: torch.dtype) -> Any:
    """``value`` in ``dtype`` when it is a floating-point tensor (integer buffers stay exact)."""
    return value.to(dtype) if torch.is_floating_point(value) else value


def load_dcp(
    path: str, states: dict[str, Any], *, model_only: bool, exclude: list[str], hint: str = ""
) -> None:
    """Load the DCP checkpoint in folder ``path`` into ``states`` (everything but ``exclude``).

    The checkpoint's index is checked first, so that a wrong path, another model's checkpoint,
    a model-only checkpoint or one saved with another data-parallel layout fails with a
    ``CheckpointError`` that says so. Nothing read runs code (``safe_read``): an index or entry
    that asks for more than plain data is an ``UnsafeCheckpoint``.
    """
    saved = _read_metadata(path)
    to_load: dict[str, Any] = {}
    model_keys: list[str] = []
    if MODEL not in exclude:
        model = states[MODEL].state_dict()
        check_model_keys(path, model, _shapes(saved))
        to_load.update(model)
        model_keys = list(model)
    if not model_only:
        for key, value in states.items():
            if key == MODEL or key in exclude:
                continue
            if not _has_entry(saved, key):
                raise CheckpointError(
                    f"{path} has no {key!r} state: it was saved model-only (a seed or last-step "
                    f"export checkpoint) and cannot resume training{hint}"
                )
            to_load[key] = value
        if DATALOADER in to_load:
            problem = data_layout_change(
                path, saved, to_load[DATALOADER].state_dict(), world_size=_world_size()
            )
            if problem is not None:
                raise CheckpointError(problem)
        rng = _rng_to_load(saved)
        if rng is not None:
            to_load[RNG] = rng
    with translated_errors(f"loading {path}", error=DamagedCheckpoint):
        dcp.load(
            to_load, checkpoint_id=path, storage_reader=SafeReader(path), planner=SafePlanner(path)
        )
    if model_keys:
        states[MODEL].load_state_dict({key: to_load[key] for key in model_keys})


def check_model_keys(path: str, model: dict[str, Any], saved: dict[str, list[int] | None]) -> None:
    """Refuse a checkpoint that lacks the model's keys or stores them with other shapes.

    ``saved`` maps each stored key to its shape (``None`` for a non-tensor value).
    """
    missing = [key for key in model if key not in saved]
    if missing:
        raise CheckpointError(
            f"{path} does not hold this model: {len(missing)} of its {len(model)} tensors are "
            f"missing, e.g. {missing[:3]}; is it a checkpoint of another model or flavor?"
        )
    wrong = [
        f"{key}: saved {saved[key]}, model {list(value.shape)}"
        for key, value in model.items()
        if saved[key] != list(value.shape)
    ]
    if wrong:
        raise CheckpointError(
            f"{path} was saved from a model of another shape ({len(wrong)} tensors differ, "
            f"e.g. {'; '.join(wrong[:3])}); check the flavor and the model's dimensions"
        )


@contextlib.contextmanager
def translated_errors(
    action: str, *, error: type[CheckpointError] = CheckpointError
) -> Iterator[None]:
    """Turn DCP's CheckpointException (a BaseException with one traceback per rank) into an
    ``error`` (a ``CheckpointError``) that names each rank's reason in one line."""
    try:
        with warnings.catch_warnings():
            # DCP warns on every call without a process group; one process is intended here.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            yield
    except dcp.CheckpointException as exc:
        # DCP wraps whatever stopped a rank, a KeyboardInterrupt (or another signal turned into
        # an exception) too; that one is the user's stop request, not a checkpoint problem.
        for failure, _ in exc.failures.values():
            if not isinstance(failure, Exception):
                raise failure from None
        # titan's own refusals (an unsafe or mismatched entry) keep their type and words.
        own = [
            failure for failure, _ in exc.failures.values() if isinstance(failure, CheckpointError)
        ]
        if own:
            raise type(own[0])("; ".join(sorted({str(failure) for failure in own}))) from None
        raise error(f"{action} failed: {failure_reasons(exc)}") from None


def failure_reasons(exc: dcp.CheckpointException) -> str:
    """Each failing rank's exception, once per distinct message."""
    return "; ".join(sorted({f"{type(e).__name__}: {e}" for e, _ in exc.failures.values()}))


def _read_metadata(path: str) -> dict[str, Any]:
    """The checkpoint's key → storage metadata, or a ``CheckpointError`` for a non-checkpoint."""
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    if not os.path.isfile(os.path.join(path, DCP_METADATA)):
        raise CheckpointError(f"{path} is not a DCP checkpoint folder ({_what_is_there(path)})")
    metadata = read_metadata_file(os.path.join(path, DCP_METADATA))
    return dict(metadata.state_dict_metadata)


def _what_is_there(path: str) -> str:
    names = sorted(os.listdir(path))
    steps = sorted((int(m.group(1)), n) for n in names if (m := COMPLETE_NAME.fullmatch(n)))
    if steps:
        latest = steps[-1][1]
        return f"it holds {latest}; point at a step folder, e.g. {os.path.join(path, latest)}"
    if any(n.endswith(".safetensors") for n in names):
        return "it holds safetensors; set checkpoint.initial_load_in_hf to load them"
    return f"no {DCP_METADATA} file; it holds {names[:5] or 'nothing'}"


def _shapes(saved: dict[str, Any]) -> dict[str, list[int] | None]:
    return {key: list(meta.size) if hasattr(meta, "size") else None for key, meta in saved.items()}


def _has_entry(saved: dict[str, Any], key: str) -> bool:
    return key in saved or any(name.startswith(f"{key}.") for name in saved)


def _rng_to_load(saved: dict[str, Any]) -> RNGState | None:
    """This rank's saved generators, or ``None`` (with a warning) when none were saved for it."""
    prefix = f"{RNG}.{RNGState().key}."
    kinds = {name[len(prefix) :] for name in saved if name.startswith(prefix)}
    if not kinds:
        log.warning(
            "the checkpoint has no RNG state for rank %d (saved by torchtitan or by a run with "
            "fewer ranks); random generators keep their current seeds",
            _rank(),
        )
        return None
    return RNGState(kinds=kinds)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _world_size() -> int:
    return dist.get_world_size() if _distributed() else 1
