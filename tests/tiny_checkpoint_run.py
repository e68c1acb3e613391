"""A tiny training run with everything a checkpoint carries, for the checkpoint tests.

Two Linear layers and AdamW, a fake data loader and step counter, all Stateful, wired to a
``CheckpointManager`` exactly as the trainer wires its parts. Used by tests/test_checkpoint.py and
by the scripts it runs in subprocesses (tests/dist_scripts/checkpoint_*.py).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from titan.components.checkpoint import CheckpointManager, ModelState


class TinyModel(nn.Module):
    """8 → hidden → 4; ``ballast`` adds a buffer of that many floats to make saves slow."""

    def __init__(self, *, hidden: int = 16, ballast: int = 0) -> None:
        super().__init__()
        self.inp = nn.Linear(8, hidden)
        self.out = nn.Linear(hidden, 4)
        if ballast:
            self.register_buffer("ballast", torch.zeros(ballast))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.inp(x)))


class OptimizerState:
    """AdamW as a Stateful, through DCP's (sharding-aware) optimizer state-dict functions."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.model, self.optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optimizer, state_dict)


@dataclasses.dataclass
class Position:
    """Stands in for the data loader (keyed per data-parallel rank) and the train state."""

    key: str
    value: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {self.key: self.value}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.value = int(state_dict[self.key])


class RenamingAdapter:
    """A state-dict adapter that prefixes every key with ``hf.``; optionally two shard files."""

    def __init__(self, *, sharded: bool = False) -> None:
        self.fqn_to_index_mapping = (
            {"hf.inp.weight": 1, "hf.inp.bias": 1, "hf.out.weight": 2, "hf.out.bias": 2}
            if sharded
            else None
        )

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        return {f"hf.{key}": value for key, value in state_dict.items()}

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        return {key.removeprefix("hf."): value for key, value in hf_state_dict.items()}


@dataclasses.dataclass
class TinyRun:
    model: TinyModel
    optimizer: torch.optim.Optimizer
    loader: Position
    train_state: Position
    manager: CheckpointManager

    def train(self, steps: int = 1) -> None:
        """Optimizer steps on random batches (so they also advance the torch RNG)."""
        for _ in range(steps):
            loss = self.model(torch.rand(4, 8)).square().mean()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.loader.value += 4
            self.train_state.value += 1

    def params(self) -> dict[str, torch.Tensor]:
        """This rank's tensors (local shards under FSDP), copied."""
        return {key: _local(value).clone() for key, value in self.model.state_dict().items()}

    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        flat = {}
        for index, state in self.optimizer.state.items():
            for name, value in state.items():
                flat[f"{index}.{name}"] = _local(value).clone()
        return flat

    def draws(self) -> tuple[list[float], float]:
        """What the random generators produce next (and so consume)."""
        return torch.rand(3).tolist(), random.random()


def tiny_run(
    dump_folder: str,
    *,
    hidden: int = 16,
    ballast: int = 0,
    parallelize: Callable[[nn.Module], None] | None = None,
    sd_adapter: Any = None,
    **checkpoint: Any,
) -> TinyRun:
    """A fresh run whose checkpoints go to ``dump_folder/checkpoint``; ``checkpoint`` overrides
    ``CheckpointManager.Config`` fields (``enable`` defaults to true)."""
    model = TinyModel(hidden=hidden, ballast=ballast)
    if parallelize is not None:
        parallelize(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    rank = dist.get_rank() if dist.is_initialized() else 0
    loader, train_state = Position(f"dp_rank_{rank}"), Position("step")
    config = CheckpointManager.Config(**{"enable": True, **checkpoint})
    manager = config.build(
        dump_folder=dump_folder,
        states={
            "model": ModelState([model]),
            "optimizer": OptimizerState(model, optimizer),
            "dataloader": loader,
            "train_state": train_state,
        },
        model_parts=[model],
        sd_adapter=sd_adapter,
        export_config_json={"model_type": "tiny", "torch_dtype": "float32"},
    )
    return TinyRun(model, optimizer, loader, train_state, manager)


def _local(value: torch.Tensor) -> torch.Tensor:
    return value.to_local() if hasattr(value, "to_local") else value
