"""Activation checkpointing of a decoder's blocks: full, every N-th block, per-op, or a budget.

Works on any model whose blocks are ``model.layers`` (an ``nn.ModuleDict``); each block is
replaced by a ``checkpoint_wrapper`` of itself, so its parameters gain the FQN segment
``_checkpoint_wrapped_module`` (DCP's ``get_model_state_dict`` strips it).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from titan.schemas.layout_rules import selective_interval

if TYPE_CHECKING:
    from titan.config.configs import ActivationCheckpointConfig


def saved_ops_under_op_sac() -> set[Any]:
    """Ops whose outputs per-op SAC keeps (torchtitan's llama3 list): matmuls, attention kernels
    (all SDPA backends, CPU's included), FSDP's reduce-scatter and low-precision amax.
    Every second ``mm`` is still recomputed: that halves matmul memory for a small recompute.
    """
    aten = torch.ops.aten
    sdpa_ops = [
        getattr(aten, name).default
        for name in (
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_flash_attention_for_cpu",
        )
        if hasattr(aten, name)
    ]
    return {
        aten.mm.default,
        *sdpa_ops,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        aten.max.default,
    }


def apply_activation_checkpointing(
    model: nn.Module,
    *,
    config: ActivationCheckpointConfig,
    saved_ops: set[Any] | None = None,
    dump_folder: str = ".",
) -> None:
    """Wrap ``model.layers`` in place as ``config.mode`` says (``saved_ops``: per-op SAC's list,
    default ``saved_ops_under_op_sac()``; ``dump_folder``: where a budget pareto plot goes).

    The config was checked by the rules every command shares (the mode's type, the budget's
    range, the selective option, a compiled model for "memory_budget":
    ``titan.schemas.layout_rules``), before anything was built.
    """
    if config.mode == "none":
        return
    if config.mode == "memory_budget":
        # The compiler's partitioner picks what to save; nothing is wrapped.
        torch._functorch.config.activation_memory_budget = config.memory_budget
        if config.visualize_memory_budget_pareto:
            pareto_dir = os.path.join(dump_folder, "memory_budget_pareto")
            os.makedirs(pareto_dir, exist_ok=True)
            torch._functorch.config.visualize_memory_budget_pareto = True
            torch._functorch.config.memory_budget_pareto_dir = pareto_dir
        return
    interval = 1 if config.mode == "full" else _selective_interval(config.selective_ac_option)
    for index, (name, block) in enumerate(list(model.layers.named_children())):
        if interval is None:
            wrapped = _op_sac_wrap(
                block,
                config=config,
                saved_ops=saved_ops_under_op_sac() if saved_ops is None else saved_ops,
                recompute_mm_shapes=_forced_recompute_shapes(block, config=config),
            )
        elif (index + 1) % interval == 0:
            wrapped = _wrap(block, config=config)
        else:
            continue
        model.layers.register_module(name, wrapped)


def _selective_interval(option: str) -> int | None:
    """Every how many blocks selective AC wraps one; None for per-op SAC ("op") on every block."""
    try:
        return selective_interval(option)
    except ValueError:
        raise ValueError(
            f"activation_checkpoint.selective_ac_option must be 'op' or a positive integer N "
            f"(checkpoint every N-th block), got {option[:40]!r}; for every block use mode = 'full'"
        ) from None


def _wrap(block: nn.Module, *, config: ActivationCheckpointConfig, **extra: Any) -> nn.Module:
    return checkpoint_wrapper(
        block,
        preserve_rng_state=config.preserve_rng_state,
        determinism_check=config.determinism_check,
        early_stop=config.early_stop,
        debug=config.debug,
        **extra,
    )


def _forced_recompute_shapes(
    block: nn.Module, *, config: ActivationCheckpointConfig
) -> set[tuple[int, int]]:
    """``(in, out)`` weight shapes of the linears named by
    ``per_op_sac_force_recompute_mm_shapes_by_fqns``; none of llama3's match the default
    ("moe.router.gate"), so for dense models this is empty.
    """
    shapes: set[tuple[int, int]] = set()
    for fqn, module in block.named_modules():
        if not any(
            pattern in fqn for pattern in config.per_op_sac_force_recompute_mm_shapes_by_fqns
        ):
            continue
        if not isinstance(module, nn.Linear):
            raise ValueError(
                "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns must name "
                f"linear layers, but {fqn!r} is a {type(module).__name__}"
            )
        out_features, in_features = module.weight.shape
        shapes.add((in_features, out_features))
    return shapes


def _op_sac_wrap(
    block: nn.Module,
    *,
    config: ActivationCheckpointConfig,
    saved_ops: set[Any],
    recompute_mm_shapes: set[tuple[int, int]],
) -> nn.Module:
    _ignore_profiler_ops_in_sac()

    def context_fn():
        # Counted separately in forward and in recomputation, so both pick the same mms.
        mm_counts: defaultdict[str, int] = defaultdict(int)
        return create_selective_checkpoint_contexts(
            _op_policy(mm_counts, saved_ops=saved_ops, recompute_mm_shapes=recompute_mm_shapes)
        )

    return _wrap(block, config=config, context_fn=context_fn)


def _ignore_profiler_ops_in_sac() -> None:
    """Leave the profiler's record-function ops out of per-op SAC's replay.

    FSDP2 hooks run under ``record_function``; with an FSDP unit inside a checkpointed block (the
    routed experts under expert parallel), torch 2.13 runs those hooks a different number of
    times in recomputation than in forward, and SAC, which replays ops by their index, fails.
    The ops carry no tensors, so nothing is lost by not replaying them.
    """
    from torch.utils.checkpoint import SAC_IGNORED_OPS

    for name in ("_record_function_enter", "_record_function_enter_new", "_record_function_exit"):
        packet = getattr(torch.ops.profiler, name)
        SAC_IGNORED_OPS.update(getattr(packet, overload) for overload in packet.overloads())


def _op_policy(
    mm_counts: defaultdict[str, int],
    *,
    saved_ops: set[Any],
    recompute_mm_shapes: set[tuple[int, int]],
) -> Callable[..., CheckpointPolicy]:
    mm = torch.ops.aten.mm.default

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        # A device-to-host copy is an activation offload: recomputing it would copy again.
        if (
            func == torch.ops.aten._to_copy.default
            and args[0].device.type != "cpu"
            and str(kwargs.get("device")) == "cpu"
        ):
            return CheckpointPolicy.MUST_SAVE
        phase = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            if tuple(args[1].shape) in recompute_mm_shapes:
                return CheckpointPolicy.PREFER_RECOMPUTE
            mm_counts[phase] += 1
            if mm_counts[phase] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return (
            CheckpointPolicy.MUST_SAVE if func in saved_ops else CheckpointPolicy.PREFER_RECOMPUTE
        )

    return policy
