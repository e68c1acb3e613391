"""The parallel degrees of a run, checked against the world size, and the device mesh they span.

torch is imported only inside the methods that build or read a mesh, so the trainer's config side
can hold a ``ParallelDims`` without importing torch.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import ParallelismConfig

# Mesh dimensions in layout order (outermost first): replicas of the model outside, shards of
# each replica next, tensor parallel innermost so its frequent collectives stay within a host.
MESH_DIM_ORDER = ("dp_replicate", "dp_shard", "tp")

# The flattened dimension of replicate x shard; built only when both are > 1, otherwise "dp" is the
# one data-parallel dimension that exists (no extra process group).
FLAT_DP_NAME = "dp"

# What each name ``ParallelDims.mesh`` accepts stands for. Without context parallel, torchtitan's
# cp-folded names ("dp_shard_cp", "dp_cp") are their plain data-parallel counterparts.
MESH_NAME_DIMS: dict[str, tuple[str, ...]] = {
    "dp": ("dp_replicate", "dp_shard"),
    "dp_cp": ("dp_replicate", "dp_shard"),
    "dp_replicate": ("dp_replicate",),
    "dp_shard": ("dp_shard",),
    "dp_shard_cp": ("dp_shard",),
    "tp": ("tp",),
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ParallelDims:
    """Resolved parallel degrees whose product is the world size."""

    dp_replicate: int
    """Data-parallel replicas: DDP, or the outer dimension of HSDP."""
    dp_shard: int
    """FSDP shards of each replica (resolved from -1)."""
    tp: int
    """Tensor-parallel degree."""
    pp: int = 1
    """Pipeline-parallel degree (always 1: titan-train has no pipeline parallel yet)."""
    cp: int = 1
    """Context-parallel degree (always 1: titan-train has no context parallel yet)."""
    ep: int = 1
    """Expert-parallel degree (always 1: titan-train has no expert parallel yet)."""
    etp: int = 1
    """Tensor-parallel degree inside experts; only meaningful with expert parallel."""
    world_size: int
    """Number of processes in the job."""
    enable_loss_parallel: bool = True
    """Whether the loss may be computed on vocabulary-sharded logits when TP is on."""

    @classmethod
    def from_config(cls, parallelism: ParallelismConfig, *, world_size: int) -> ParallelDims:
        """The degrees of ``parallelism`` for ``world_size`` processes; ``ValueError`` if they
        cannot run (a degree < 1, or a product other than the world size).

        Pipeline, context and expert parallel degrees are not read: the model's capability
        check (``ModelSpec.refusals``) refuses them before a run is built.
        """
        if world_size < 1:
            raise ValueError(f"the world size must be at least 1, got {world_size}")
        replicate = parallelism.data_parallel_replicate_degree
        shard = parallelism.data_parallel_shard_degree
        tp = parallelism.tensor_parallel_degree
        for field_name, degree in (
            ("data_parallel_replicate_degree", replicate),
            ("tensor_parallel_degree", tp),
        ):
            if degree < 1:
                raise ValueError(f"parallelism.{field_name} must be at least 1, got {degree}")
        if shard == -1:
            shard = _leftover_shard_degree(replicate=replicate, tp=tp, world_size=world_size)
        elif shard < 1:
            raise ValueError(
                f"parallelism.data_parallel_shard_degree must be -1 (all ranks left over) or "
                f"at least 1, got {shard}"
            )
        product = replicate * shard * tp
        if product != world_size:
            raise ValueError(
                "the parallel degrees do not multiply to the world size: "
                f"data_parallel_replicate_degree ({replicate}) x data_parallel_shard_degree "
                f"({shard}) x tensor_parallel_degree ({tp}) = {product}, but the world size is "
                f"{world_size}; hint: set data_parallel_shard_degree = -1 to take the ranks left "
                "over, or launch a matching number of processes"
            )
        return cls(
            dp_replicate=replicate,
            dp_shard=shard,
            tp=tp,
            etp=parallelism.expert_tensor_parallel_degree,
            world_size=world_size,
            enable_loss_parallel=not parallelism.disable_loss_parallel,
        )

    # What is switched on.
    @property
    def dp_enabled(self) -> bool:
        """Whether the batch is split over more than one data-parallel rank."""
        return self.dp_degree > 1

    @property
    def dp_replicate_enabled(self) -> bool:
        """Whether the model is replicated (DDP, or the replicas of HSDP)."""
        return self.dp_replicate > 1

    @property
    def dp_shard_enabled(self) -> bool:
        """Whether parameters are sharded with FSDP."""
        return self.dp_shard > 1

    @property
    def fsdp_enabled(self) -> bool:
        """Whether FSDP shards the model (same as ``dp_shard_enabled`` without context parallel)."""
        return self.dp_shard_enabled

    @property
    def tp_enabled(self) -> bool:
        """Whether tensor parallel splits the model's matmuls."""
        return self.tp > 1

    @property
    def loss_parallel_enabled(self) -> bool:
        """Whether the loss runs on vocabulary-sharded logits (TP on, loss parallel not disabled)."""
        return self.tp_enabled and self.enable_loss_parallel

    @property
    def dp_degree(self) -> int:
        """Number of data-parallel ranks: replicas times shards."""
        return self.dp_replicate * self.dp_shard

    @property
    def non_data_parallel_size(self) -> int:
        """Ranks that see the same batch (one data-parallel rank's model-parallel group)."""
        return self.world_size // self.dp_degree

    @property
    def seq_len_divisor(self) -> int:
        """What the sequence length must be a multiple of: sequence parallel splits it by TP."""
        return self.tp

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """Named dimensions of the world mesh: those whose degree is > 1, in layout order."""
        degrees = {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "tp": self.tp}
        return tuple(name for name in MESH_DIM_ORDER if degrees[name] > 1)

    @property
    def fsdp_mesh_dim_names(self) -> tuple[str, ...]:
        """Mesh dimensions ``fully_shard`` takes: both for HSDP, the shard one alone for FSDP."""
        if self.dp_replicate_enabled:
            return ("dp_replicate", "dp_shard")
        return ("dp_shard",)

    # The mesh.
    def build_mesh(self, device_type: str) -> DeviceMesh | None:
        """The world mesh over ``device_type`` ("cpu", "cuda"), or None for a single process.

        When both data-parallel dimensions are > 1, also builds the flattened "dp" dimension used
        for data loading and the loss all-reduce.
        """
        if self.world_size == 1:
            return None
        from torch.distributed.device_mesh import init_device_mesh

        names = self.mesh_dim_names
        degrees = {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "tp": self.tp}
        world_mesh = init_device_mesh(
            device_type, tuple(degrees[name] for name in names), mesh_dim_names=names
        )
        if self.dp_replicate_enabled and self.dp_shard_enabled:
            world_mesh["dp_replicate", "dp_shard"]._flatten(FLAT_DP_NAME)
        return world_mesh

    def mesh(self, world_mesh: DeviceMesh | None, name: str) -> DeviceMesh | None:
        """The sub-mesh ``name`` ("dp", "dp_shard", "dp_replicate", "tp", "dp_shard_cp", "dp_cp")
        of ``world_mesh``; None when every dimension it stands for has degree 1.
        """
        if name not in MESH_NAME_DIMS:
            raise KeyError(f"unknown mesh name {name!r}; known: {', '.join(MESH_NAME_DIMS)}")
        if world_mesh is None:
            return None
        present = [dim for dim in MESH_NAME_DIMS[name] if dim in self.mesh_dim_names]
        if not present:
            return None
        if len(present) == 1:
            return world_mesh[present[0]]
        # Idempotent: returns the flattened mesh build_mesh made (slicing "dp" out of the root
        # mesh instead is deprecated).
        return world_mesh[tuple(present)]._flatten(FLAT_DP_NAME)

    def dp_rank(self, world_mesh: DeviceMesh | None) -> int:
        """This process's data-parallel rank (which slice of the global batch it loads)."""
        dp_mesh = self.mesh(world_mesh, "dp")
        return 0 if dp_mesh is None else dp_mesh.get_local_rank()


def _leftover_shard_degree(*, replicate: int, tp: int, world_size: int) -> int:
    """``data_parallel_shard_degree = -1``: every rank the other degrees leave over."""
    others = replicate * tp
    if world_size % others != 0:
        raise ValueError(
            f"cannot resolve data_parallel_shard_degree = -1: the world size {world_size} is not "
            f"a multiple of data_parallel_replicate_degree ({replicate}) x tensor_parallel_degree "
            f"({tp}) = {others}"
        )
    return world_size // others
