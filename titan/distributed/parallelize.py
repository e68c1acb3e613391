"""Parallelizing any family's model: the family's TP/EP plan, then AC, compile and FSDP2 / DDP.

The order is torchtitan's: TP rewrites the linears into DTensor shards first, AC wraps the blocks,
compile traces the wrapped blocks, and FSDP shards last so that it sees the final module tree
(its all-gathers and reduce-scatters then surround the compiled regions). What a family does
differently is its TP/EP plan, named by ``ModelSpec.parallelize_fn``, and its FSDP units, which a
model may give as ``model.fsdp_units()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from titan.distributed.activation_checkpoint import apply_activation_checkpointing
from titan.distributed.amp import DTYPE_OF_NAME
from titan.distributed.expert_parallel import apply_expert_parallel, shard_experts_with_fsdp

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.config.configs import (
        ActivationCheckpointConfig,
        CompileConfig,
        ParallelismConfig,
        TrainingConfig,
    )
    from titan.distributed.parallel_dims import ParallelDims
    from titan.protocols.model_spec import ModelSpec

# fsdp_reshard_after_forward -> fully_shard's reshard_after_forward. "default" is True without
# pipeline parallel and False with it (torchtitan's policy: a stage runs several microbatches'
# forwards in a row, and gathering its parameters again for each would repeat the all-gathers).
RESHARD_AFTER_FORWARD = {"default": True, "always": True, "never": False}

# DDP gradient buckets, as torchtitan sizes them.
DDP_BUCKET_CAP_MB = 100


def parallelize_model(
    model: nn.Module,
    *,
    spec: ModelSpec,
    parallel_dims: ParallelDims,
    world_mesh: DeviceMesh | None,
    training: TrainingConfig,
    parallelism: ParallelismConfig,
    activation_checkpoint: ActivationCheckpointConfig,
    compile: CompileConfig,
    float8_enabled: bool = False,
    dump_folder: str = ".",
) -> nn.Module:
    """Apply the family's TP plan, AC, per-block compile and FSDP2/HSDP or DDP to ``model`` in
    place, as the config sections say; returns ``model``.

    Call it on the model built on the meta device (after model converters), before
    ``to_empty``/``init_weights``. ``float8_enabled``: the linears are torchao float8 linears with
    the *tensorwise* recipe, whose TP shards are all-gathered in float8 (pass False for rowwise
    recipes: they use plain TP). Raises ``ValueError`` for a combination that cannot run, before
    the model changes.
    """
    model_compile_enabled = compile.enable and "model" in compile.components
    refuse_unrunnable(
        parallelism=parallelism,
        device_type=None if world_mesh is None else world_mesh.device_type,
    )
    if parallel_dims.tp_enabled:
        assert world_mesh is not None
        tp_mesh = world_mesh["tp"]
        spec.resolve("parallelize_fn")(
            model,
            tp_mesh=tp_mesh,
            loss_parallel=parallel_dims.loss_parallel_enabled,
            float8_enabled=float8_enabled,
            moe_layout=parallel_dims.moe_layout,
        )
        if parallelism.enable_async_tensor_parallel:
            _enable_async_tp(tp_mesh)
    if parallel_dims.ep_enabled:
        assert world_mesh is not None
        apply_expert_parallel(
            model,
            ep_mesh=parallel_dims.mesh(world_mesh, "ep"),
            expert_tp_mesh=parallel_dims.expert_tensor_mesh(world_mesh),
        )
    apply_activation_checkpointing(
        model,
        config=activation_checkpoint,
        dump_folder=dump_folder,
    )
    if model_compile_enabled:
        apply_compile(model, backend=compile.backend)
    if parallel_dims.fsdp_enabled:
        assert world_mesh is not None
        apply_fsdp(
            model,
            dp_mesh=world_mesh[parallel_dims.fsdp_mesh_dim_names],
            param_dtype=DTYPE_OF_NAME[training.mixed_precision_param],
            reduce_dtype=DTYPE_OF_NAME[training.mixed_precision_reduce],
            reshard_after_forward=parallelism.fsdp_reshard_after_forward,
            pp_enabled=parallel_dims.pp_enabled,
            cpu_offload=training.enable_cpu_offload,
            expert_mesh=(
                world_mesh[parallel_dims.expert_fsdp_mesh_dim_names]
                if parallel_dims.ep_enabled
                else None
            ),
            ep_degree=parallel_dims.ep,
            gradient_divide_factor=parallel_dims.fsdp_gradient_divide_factor,
        )
    elif parallel_dims.dp_replicate_enabled:
        assert world_mesh is not None
        apply_ddp(model, dp_mesh=world_mesh["dp_replicate"], compile_enabled=model_compile_enabled)
    return model


def refuse_unrunnable(*, parallelism: ParallelismConfig, device_type: str | None) -> None:
    """Raise ``ValueError`` for what cannot run on this machine although the config's layout is
    sound. The layout itself (degrees, heads, sequence, compile, DDP, offload) is decided by the
    rules every command shares (``titan.schemas.layout_rules``), which the run's checks apply
    before anything is built (``titan.training.run_checks.refuse_findings``)."""
    if parallelism.enable_async_tensor_parallel and device_type not in (None, "cuda"):
        raise ValueError("async tensor parallel needs CUDA (symmetric memory); it is off on CPU")


def _enable_async_tp(tp_mesh: DeviceMesh) -> None:
    """Let inductor overlap TP's collectives with matmuls through symmetric memory."""
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    torch._inductor.config._micro_pipeline_tp = True
    enable_symm_mem_for_group(tp_mesh.get_group().group_name)


def apply_compile(model: nn.Module, *, backend: str) -> None:
    """Compile each block in place (``Module.compile``, so parameter names do not change).

    Per block, not the whole model: the blocks are identical, so one compilation serves them all,
    and FSDP's per-block hooks stay outside the graphs.
    """
    for block in model.layers.values():
        block.compile(backend=backend, fullgraph=True)


def fsdp_units(model: nn.Module) -> list[list[nn.Module]]:
    """The module groups FSDP shards one by one: ``model.fsdp_units()`` when the model defines
    it, else the embeddings, each block, then the final norm with the output projection."""
    if hasattr(model, "fsdp_units"):
        units = model.fsdp_units()
    else:
        units = [
            [model.tok_embeddings],
            *([block] for block in model.layers.values()),
            [model.norm, model.output],
        ]
    # A pipeline stage lacks the modules other stages hold (they are None).
    units = [[module for module in unit if module is not None] for unit in units]
    return [unit for unit in units if unit]


def apply_fsdp(
    model: nn.Module,
    *,
    dp_mesh: DeviceMesh,
    param_dtype: torch.dtype,
    reduce_dtype: torch.dtype,
    reshard_after_forward: str = "default",
    pp_enabled: bool = False,
    cpu_offload: bool = False,
    expert_mesh: DeviceMesh | None = None,
    ep_degree: int = 1,
    gradient_divide_factor: int = 1,
) -> None:
    """Shard ``model`` with FSDP2 over ``dp_mesh`` (1-D: FSDP; 2-D replicate x shard: HSDP).

    Units: :func:`fsdp_units`, then the root (which holds what is left, such as the rope buffer).
    Under expert parallel (``expert_mesh``: the ranks EP leaves, see ``ParallelDims``), each MoE
    layer's routed experts are a unit of their own over ``expert_mesh`` first, their gradients
    divided by ``gradient_divide_factor`` (the data-parallel degree).
    """
    reshard = RESHARD_AFTER_FORWARD[reshard_after_forward]
    if reshard_after_forward == "default" and pp_enabled:
        reshard = False
    shard_options: dict[str, Any] = {
        "mesh": dp_mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
    }
    if cpu_offload:
        # Pinned host memory needs an accelerator; on a CPU-only host the shards are already in
        # host memory and only pageable memory exists.
        shard_options["offload_policy"] = CPUOffloadPolicy(pin_memory=dp_mesh.device_type != "cpu")
    if expert_mesh is not None:
        shard_experts_with_fsdp(
            model,
            ep_degree=ep_degree,
            gradient_divide_factor=gradient_divide_factor,
            reshard_after_forward=reshard,
            **{**shard_options, "mesh": expert_mesh},
        )
    *units, last = fsdp_units(model)
    for unit in units:
        fully_shard(_one_or_group(unit), reshard_after_forward=reshard, **shard_options)
    # The last unit is needed again at once by backward, so by default it stays gathered.
    fully_shard(
        _one_or_group(last),
        reshard_after_forward=reshard_after_forward == "always",
        **shard_options,
    )
    fully_shard(model, **shard_options)


def _one_or_group(unit: list[nn.Module]) -> nn.Module | list[nn.Module]:
    """What ``fully_shard`` takes for ``unit``: the module itself when it is alone."""
    return unit[0] if len(unit) == 1 else unit


def apply_ddp(model: nn.Module, *, dp_mesh: DeviceMesh, compile_enabled: bool) -> None:
    """Replicate ``model`` over ``dp_mesh`` with DDP (composable ``replicate``)."""
    from torch.distributed._composable.replicate import replicate

    if compile_enabled:
        # Lets dynamo split compiled graphs at DDP bucket boundaries so all-reduces overlap.
        torch._dynamo.config.optimize_ddp = "ddp_optimizer"
    replicate(model, device_mesh=dp_mesh, bucket_cap_mb=DDP_BUCKET_CAP_MB)
