"""The TorchFT manager that coordinates replica groups."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class FTManager(Configurable):
    """Joins this replica group to the TorchFT lighthouse and synchronizes with the others."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """TorchFT replica groups and semi-synchronous training."""

        enable: bool = False
        """Enable TorchFT fault tolerance."""
        process_group: str = "gloo"
        """Backend of the fault-tolerance process group: gloo or nccl."""
        process_group_timeout_ms: int = 10000
        """Abort timeout of the fault-tolerance process group in milliseconds."""
        replica_id: int = 0
        """This replica group's id."""
        group_size: int = 0
        """Number of replica groups."""
        min_replica_size: int = 1
        """Minimum number of replicas that must take part in a step."""
        semi_sync_method: str | None = None
        """Semi-synchronous training method: local_sgd or diloco."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("FTManager")


class FaultTolerance(FTManager):
    """TorchFT with the Streaming DiLoCo options of the ``torchtitan.components.ft`` module."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(FTManager.Config):
        """Fault tolerance extended for Streaming DiLoCo."""

        sync_steps: int = 5
        """Steps between synchronizations; only used when semi_sync_method is set."""
        should_quantize: bool = False
        """Quantize the gradients before the allreduce; only used when semi_sync_method is set."""
        fragment_sync_delay: int = 0
        """Inner steps to wait before blocking on a fragment's synchronization (DiLoCo's tau)."""
        fragment_update_alpha: float = 0.0
        """How much of the local parameters to mix into the synchronized ones (0 = global only)."""
        module_fqns_per_model_fragment: list[list[str]] = field(default_factory=list)
        """Module FQNs of each model fragment, one inner list per fragment."""
        num_fragments: int = 1
        """Number of fragments to split the model into when semi_sync_method is diloco."""
