"""The parallel degrees of a run, checked against the world size, and the device mesh they span.

torch is imported only inside the methods that build or read a mesh, so the trainer's config side
can hold a ``ParallelDims`` without importing torch.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from titan.schemas.expert_rules import expert_borrowed_degree, expert_layout_problem
from titan.schemas.layout_rules import resolve_dp_shard

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import ParallelismConfig

# Mesh dimensions in layout order (outermost first): replicas of the model outside, shards of
# each replica next, tensor parallel innermost so its frequent collectives stay within a host.
# With expert parallel, dp_shard is split into the part EP does not borrow (dp_shard_mod_ep, the
# FSDP shards of the experts) and the part it borrows (dp_shard_in_ep), which keeps the ranks of
# one EP group adjacent, as torchtitan v0.2.0 laid them out. Pipeline stages are outermost: their
# point-to-point sends are the rarest traffic, so they may cross hosts. Context parallel sits
# between the shards and tensor parallel, as in torchtitan.
MESH_DIM_ORDER = (
    "pp",
    "dp_replicate",
    "dp_shard",
    "dp_shard_mod_ep",
    "dp_shard_in_ep",
    "cp",
    "tp",
)

# The flattened dimension of replicate x shard; built only when both are > 1, otherwise "dp" is the
# one data-parallel dimension that exists (no extra process group).
FLAT_DP_NAME = "dp"

# What each name ``ParallelDims.mesh`` accepts stands for. torchtitan's cp-folded names
# ("dp_shard_cp": what FSDP shards over, "dp_cp": what the loss is averaged over) add the context
# parallel ranks, which see other tokens of the same batch; without CP they are their plain
# data-parallel counterparts. "dp_shard" is one dimension without EP and the two EP halves of it
# with EP; "ep" is the borrowed half with the context parallel ranks (and tp when the experts are
# not TP-sharded), as torchtitan v0.2.2 formed its expert mesh out of dp_shard × cp (× tp);
# "efsdp" shards the experts with FSDP. "dp_tp" (titan's) holds every rank that routes its own
# tokens when expert parallel takes the TP ranks (the context parallel ones included).
MESH_NAME_DIMS: dict[str, tuple[str, ...]] = {
    "dp": ("dp_replicate", "dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep"),
    "dp_cp": ("dp_replicate", "dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep", "cp"),
    "dp_replicate": ("dp_replicate",),
    "dp_shard": ("dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep"),
    "dp_shard_cp": ("dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep", "cp"),
    "cp": ("cp",),
    "tp": ("tp",),
    "ep": ("dp_shard_in_ep", "cp", "tp"),
    "efsdp": ("dp_shard_mod_ep",),
    "dp_tp": ("dp_replicate", "dp_shard", "dp_shard_mod_ep", "dp_shard_in_ep", "cp", "tp"),
    "dp_shard_mod_ep": ("dp_shard_mod_ep",),
    "dp_shard_in_ep": ("dp_shard_in_ep",),
    "pp": ("pp",),
}


# How tensor parallel runs the MoE layers (``ParallelDims.moe_layout``): every TP rank runs every
# expert on the same tokens ("replicated"); EP takes the TP ranks and each routes its own sequence
# slice ("token_split"); or expert tensor parallel splits each expert's hidden units over the TP
# ranks, which route the same tokens ("hidden_split").
MoELayout = Literal["replicated", "token_split", "hidden_split"]


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
    """Pipeline-parallel degree: the model is cut into stages over this many ranks."""
    cp: int = 1
    """Context-parallel degree: each rank of a CP group holds ``seq_len / cp`` tokens of the
    same sequences (``titan.distributed.cp_batch``)."""
    ep: int = 1
    """Expert-parallel degree: the routed experts are split over this many ranks."""
    etp: int = 1
    """Tensor-parallel degree inside experts; only meaningful with expert parallel."""
    world_size: int
    """Number of processes in the job."""
    enable_loss_parallel: bool = True
    """Whether the loss may be computed on vocabulary-sharded logits when TP is on."""

    @classmethod
    def from_config(cls, parallelism: ParallelismConfig, *, world_size: int) -> ParallelDims:
        """The degrees of ``parallelism`` for ``world_size`` processes.

        Whether a layout can run is decided by the layout rules every command shares
        (``titan.schemas.layout_rules``, ``expert_rules``, ``pipeline_rules``), which the run's
        checks apply before this is called (``titan.training.run_checks.refuse_findings``); the
        shard degree -1 is resolved by the same function the rules use. A layout the rules would
        refuse raises ``ValueError`` here instead of becoming a wrong mesh. What a family does
        not run yet is refused before, by its capability record (``ModelSpec.refusals``).
        """
        replicate = parallelism.data_parallel_replicate_degree
        tp = parallelism.tensor_parallel_degree
        cp = parallelism.context_parallel_degree
        pp = parallelism.pipeline_parallel_degree
        ep = parallelism.expert_parallel_degree
        etp = parallelism.expert_tensor_parallel_degree
        shard = resolve_dp_shard(
            parallelism.data_parallel_shard_degree,
            world_size=world_size,
            replicate=replicate,
            tp=tp,
            pp=pp,
            cp=cp,
        )
        degrees = (pp, replicate, tp, cp, ep, etp)
        if (
            shard is None
            or min(shard, *degrees) < 1
            or pp * replicate * shard * cp * tp != world_size
        ):
            raise ValueError(
                f"parallelism {_layout_words(parallelism)} cannot run on {world_size} "
                "processes; titan-validate --ngpu N names what to change"
            )
        if ep > 1 and expert_layout_problem(ep=ep, etp=etp, tp=tp, cp=cp, dp_shard=shard):
            raise ValueError(
                f"parallelism {_layout_words(parallelism)} cannot lay out expert parallel; "
                "titan-validate --ngpu N names what to change"
            )
        return cls(
            dp_replicate=replicate,
            dp_shard=shard,
            tp=tp,
            pp=pp,
            cp=cp,
            ep=ep,
            etp=etp,
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
    def cp_enabled(self) -> bool:
        """Whether context parallel splits each sequence over ranks."""
        return self.cp > 1

    @property
    def fsdp_enabled(self) -> bool:
        """Whether FSDP shards the model: over the shard ranks and the context parallel ones,
        which hold the same weights and average their gradients as data-parallel ranks do."""
        return self.dp_shard_enabled or self.cp_enabled

    @property
    def pp_enabled(self) -> bool:
        """Whether the model is cut into pipeline stages over several ranks."""
        return self.pp > 1

    @property
    def tp_enabled(self) -> bool:
        """Whether tensor parallel splits the model's matmuls."""
        return self.tp > 1

    @property
    def ep_enabled(self) -> bool:
        """Whether the routed experts are split over ranks (expert parallel)."""
        return self.ep > 1

    @property
    def etp_enabled(self) -> bool:
        """Whether tensor parallel also splits each expert (only with expert parallel)."""
        return self.ep_enabled and self.etp > 1

    @property
    def ep_borrows_tp(self) -> bool:
        """Whether the EP groups hold the TP ranks (``etp = 1`` with TP): each TP rank then routes
        its own sequence slice to the experts instead of every rank the same tokens."""
        return self.ep_enabled and self.tp_enabled and self.etp == 1

    @property
    def moe_layout(self) -> MoELayout:
        """How tensor parallel runs the MoE layers (see :data:`MoELayout`)."""
        if self.ep_borrows_tp:
            return "token_split"
        if self.etp_enabled:
            return "hidden_split"
        return "replicated"

    @property
    def dp_shard_in_ep(self) -> int:
        """The part of dp_shard that expert parallel borrows (1 without EP)."""
        if not self.ep_enabled:
            return 1
        return self.ep // expert_borrowed_degree(tp=self.tp, cp=self.cp, etp=self.etp)

    @property
    def dp_shard_mod_ep(self) -> int:
        """The part of dp_shard that EP leaves: the experts' FSDP degree (dp_shard without EP)."""
        return self.dp_shard // self.dp_shard_in_ep

    @property
    def fsdp_gradient_divide_factor(self) -> int:
        """What FSDP divides every gradient by, experts included: the data-parallel degree.

        The experts' FSDP mesh is smaller than the dense one (EP took the rest), but their
        gradients already sum the tokens of every data-parallel rank through the all-to-all, so
        they are averaged like all others.
        """
        return self.dp_replicate * self.dp_shard * self.cp

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
        """Ranks that see the same batch (one data-parallel rank's model-parallel group, pipeline
        stages included)."""
        return self.world_size // self.dp_degree

    @property
    def seq_len_divisor(self) -> int:
        """What the sequence length must be a multiple of: context parallel cuts it into ``2 *
        cp`` chunks, and sequence parallel splits each rank's share by TP."""
        return self.tp * (2 * self.cp if self.cp_enabled else 1)

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """Named dimensions of the world mesh: those whose degree is > 1, in layout order; with
        EP, dp_shard's two halves, dp_shard_mod_ep always (FSDP wraps the experts even on 1 rank
        so that they run under the same mixed precision as the rest of the block)."""
        degrees = self._degrees()
        return tuple(
            name
            for name in MESH_DIM_ORDER
            if degrees[name] > 1 or (name == "dp_shard_mod_ep" and self.ep_enabled)
        )

    @property
    def fsdp_mesh_dim_names(self) -> tuple[str, ...]:
        """Mesh dimensions ``fully_shard`` takes: both for HSDP, the shard one alone for FSDP
        (with EP, "dp_shard" is the flattened dimension :meth:`build_mesh` makes, or the one half
        of it that is not of size 1 when EP takes the TP ranks; with context parallel,
        "dp_shard_cp", the shard and CP ranks flattened, or "cp" alone)."""
        name = "dp_shard_cp" if self.cp_enabled else "dp_shard"
        shard_dims = self._present_dims(name)
        shard = shard_dims[0] if len(shard_dims) == 1 else name
        if self.dp_replicate_enabled:
            return ("dp_replicate", shard)
        return (shard,)

    @property
    def expert_fsdp_mesh_dim_names(self) -> tuple[str, ...]:
        """Mesh dimensions ``fully_shard`` takes for the routed experts under EP."""
        if self.dp_replicate_enabled:
            return ("dp_replicate", "dp_shard_mod_ep")
        return ("dp_shard_mod_ep",)

    def _degrees(self) -> dict[str, int]:
        """The degree of each dimension of ``MESH_DIM_ORDER``."""
        if self.ep_enabled:
            shard, mod_ep, in_ep = 1, self.dp_shard_mod_ep, self.dp_shard_in_ep
        else:
            shard, mod_ep, in_ep = self.dp_shard, 1, 1
        return {
            "pp": self.pp,
            "dp_replicate": self.dp_replicate,
            "dp_shard": shard,
            "dp_shard_mod_ep": mod_ep,
            "dp_shard_in_ep": in_ep,
            "cp": self.cp,
            "tp": self.tp,
        }

    # The mesh.
    def build_mesh(self, device_type: str) -> DeviceMesh | None:
        """The world mesh over ``device_type`` ("cpu", "cuda"), or None for a single process.

        Also builds the flattened dimensions the run uses, so that every rank creates their
        process groups in the same order: "dp" when both data-parallel dimensions are > 1,
        "dp_shard_cp" and "dp_cp" with context parallel, and
        with EP "dp_shard" (the dense FSDP dimension) and "ep" when they span several dimensions,
        and "dp_tp" when EP takes the TP ranks.
        """
        if self.world_size == 1:
            return None
        from torch.distributed.device_mesh import init_device_mesh

        names = self.mesh_dim_names
        degrees = self._degrees()
        world_mesh = init_device_mesh(
            device_type, tuple(degrees[name] for name in names), mesh_dim_names=names
        )
        cp_names = ("dp_shard_cp", "dp_cp") if self.cp_enabled else ()
        for name in (
            "dp_shard",
            "dp",
            *cp_names,
            "ep",
            *(("dp_tp",) if self.ep_borrows_tp else ()),
        ):
            self.mesh(world_mesh, name)
        return world_mesh

    def mesh(self, world_mesh: DeviceMesh | None, name: str) -> DeviceMesh | None:
        """The sub-mesh ``name`` (a key of ``MESH_NAME_DIMS``) of ``world_mesh``; None when
        every dimension it stands for has degree 1 ("efsdp" exists, maybe of size 1, with EP)."""
        if name not in MESH_NAME_DIMS:
            raise KeyError(f"unknown mesh name {name!r}; known: {', '.join(MESH_NAME_DIMS)}")
        if world_mesh is None:
            return None
        present = self._present_dims(name)
        if not present:
            return None
        if len(present) == 1:
            return world_mesh[present[0]]
        # Idempotent: returns the flattened mesh build_mesh made (slicing it out of the root
        # mesh instead is deprecated). One name per set of dimensions, so "dp" without replicas
        # is the same process group as "dp_shard".
        return world_mesh[present]._flatten(_flat_name(present))

    def _present_dims(self, name: str) -> tuple[str, ...]:
        """The world-mesh dimensions that mesh ``name`` spans in this layout."""
        dims = MESH_NAME_DIMS[name]
        if name == "ep":
            if not self.ep_enabled:
                return ()  # tp alone is not an expert group
            if self.etp != 1:
                dims = ("dp_shard_in_ep", "cp")  # TP shards inside each expert instead
        return tuple(dim for dim in dims if dim in self.mesh_dim_names)

    def expert_tensor_mesh(self, world_mesh: DeviceMesh | None) -> DeviceMesh | None:
        """The 2-D ``(ep, tp)`` mesh over which expert tensor parallel splits the experts (whole
        experts over ep, hidden units over tp); None without expert tensor parallel."""
        if world_mesh is None or not self.etp_enabled:
            return None
        ep_dims = self._present_dims("ep")
        if len(ep_dims) == 1:
            return world_mesh[(*ep_dims, "tp")]
        # EP spans the borrowed shards and the CP ranks: one dimension of them, then tp. The ranks
        # are adjacent in the world mesh, so flattening and cutting again keeps every group.
        flat = world_mesh[(*ep_dims, "tp")]._flatten("ep_etp")
        return flat._unflatten(0, (self.ep, self.tp), ("ep", "etp"))

    def dp_rank(self, world_mesh: DeviceMesh | None) -> int:
        """This process's data-parallel rank (which slice of the global batch it loads)."""
        dp_mesh = self.mesh(world_mesh, "dp")
        return 0 if dp_mesh is None else dp_mesh.get_local_rank()


# The dimensions only an expert group spans several of: with EP, every other name that holds
# one of them also holds dp_shard_mod_ep (always in the mesh) or a dimension outside this set.
_EXPERT_GROUP_DIMS = frozenset(MESH_NAME_DIMS["ep"])


def _flat_name(dims: tuple[str, ...]) -> str:
    """The name of the flattened mesh over ``dims``: the expert group ("ep", out of the borrowed
    shards, the context parallel and the TP ranks), data parallel with tp (and cp: "dp_tp"),
    data parallel with context parallel ("dp_cp" with replicas, else "dp_shard_cp"), data
    parallel with replicas ("dp"), else the (EP-split) shard dimension."""
    if set(dims) <= _EXPERT_GROUP_DIMS:
        return "ep"
    if "tp" in dims:
        return "dp_tp"
    if "cp" in dims:
        return "dp_cp" if "dp_replicate" in dims else "dp_shard_cp"
    if "dp_replicate" in dims:
        return FLAT_DP_NAME
    return "dp_shard"


def _layout_words(parallelism: ParallelismConfig) -> str:
    """The degrees of ``parallelism`` as a config writes them."""
    return ", ".join(
        f"{name} = {getattr(parallelism, name)}"
        for name in (
            "pipeline_parallel_degree",
            "data_parallel_replicate_degree",
            "data_parallel_shard_degree",
            "context_parallel_degree",
            "tensor_parallel_degree",
            "expert_parallel_degree",
            "expert_tensor_parallel_degree",
        )
    )
