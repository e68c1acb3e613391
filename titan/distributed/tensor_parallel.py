"""The tensor-parallel pieces every decoder family's TP plan is made of.

Between blocks the activations are sharded on the sequence (dim 1, sequence parallel); each block
gathers them before attention and the feed-forward and reduce-scatters after. A family's plan
(``ModelSpec.parallelize_fn``) applies :func:`parallelize_decoder_ends` once and, per block,
:func:`attention_plan` and :func:`feed_forward_plan` (or :func:`moe_plan`) plus whatever
its own modules need.

A family's plan picks the MoE layers' plan with :func:`moe_plan`:

- TP alone: MoE layers run *replicated* across the TP ranks (:func:`replicated_moe_plan`): each
  gathers the whole sequence, routes it, runs the router, every expert and the shared expert on
  all of it, and keeps its own sequence slice of the output; their parameters become replicated
  DTensors, so clipping, optimizers and FSDP see one kind of parameter. This spends the TP ranks'
  compute on duplicate expert work instead of sharding the experts' hidden dimension as
  torchtitan's ``apply_moe_ep_tp`` does; the math stays exactly the one-process math.
- Expert parallel over the TP ranks too (``expert_tensor_parallel_degree = 1``, so EP borrows TP):
  nothing is gathered (:func:`token_split_moe_plan`). Each TP rank routes only its own sequence
  slice and sends those tokens to their experts over the EP group, which holds the TP ranks; the
  router's gate and the shared experts are replicated parameters applied to different tokens on
  each rank, so their gradients are summed over the TP ranks (DTensor's ``Partial``), as the
  sequence-parallel norms' are. torchtitan gathers the sequence and splits the flattened tokens
  instead (``ReordererSequenceParallel``), then reduce-scatters the output: same math, one
  all-gather and one reduce-scatter more per MoE layer.
- Expert tensor parallel (``expert_tensor_parallel_degree = tensor_parallel_degree``): the MoE
  layers run replicated as under TP alone, except the routed experts, which
  ``titan.distributed.expert_parallel.ExpertTensorParallel`` splits over EP (whole experts) and
  TP (hidden units), summing their partial outputs over TP before the scores weight them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.distributed.parallel_dims import MoELayout


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TPStyles:
    """The column-wise, row-wise and input-preparing ``ParallelStyle`` classes to use."""

    colwise: Any
    """Shards a linear's output features (``ColwiseParallel`` or torchao's float8 one)."""
    rowwise: Any
    """Shards a linear's input features (``RowwiseParallel`` or torchao's float8 one)."""
    prepare_input: Any
    """Redistributes a module's inputs (``PrepareModuleInput`` or torchao's float8 one)."""


def tp_styles(float8_enabled: bool) -> TPStyles:
    """torch's plain styles; with ``float8_enabled``, torchao's, which all-gather float8
    (tensorwise-scaled) activations instead of bf16 ones."""
    if not float8_enabled:
        return TPStyles(
            colwise=ColwiseParallel, rowwise=RowwiseParallel, prepare_input=PrepareModuleInput
        )
    from torchao.float8.float8_tensor_parallel import (
        Float8ColwiseParallel,
        Float8RowwiseParallel,
        PrepareFloat8ModuleInput,
    )

    return TPStyles(
        colwise=Float8ColwiseParallel,
        rowwise=Float8RowwiseParallel,
        prepare_input=PrepareFloat8ModuleInput,
    )


def parallelize_decoder_ends(model: nn.Module, *, tp_mesh: DeviceMesh, loss_parallel: bool) -> None:
    """Shard the token embeddings (their output sequence-sharded), the final norm (sequence
    parallel) and the output projection over ``tp_mesh``.

    With ``loss_parallel`` the output logits stay sharded on the vocabulary (a DTensor): compute
    the loss under ``torch.distributed.tensor.parallel.loss_parallel()``.
    """
    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(
            input_layouts=Shard(1),
            output_layouts=Shard(-1) if loss_parallel else Replicate(),
            use_local_output=not loss_parallel,
        ),
    }
    # A pipeline stage holds only some of the ends (the others are None).
    plan = {name: style for name, style in plan.items() if getattr(model, name) is not None}
    if plan:
        parallelize_module(model, tp_mesh, plan)


def attention_plan(styles: TPStyles) -> dict[str, ParallelStyle]:
    """A block's plan for its attention norm and grouped-query attention (``wq``, ``wk``, ``wv``
    column-wise: each rank holds whole heads; ``wo`` row-wise), and for its feed-forward norm."""
    return {
        "attention_norm": SequenceParallel(),
        # The rope table (the second input) is a plain full tensor: left as it is.
        "attention": styles.prepare_input(
            input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
        ),
        "attention.wq": styles.colwise(),
        "attention.wk": styles.colwise(),
        "attention.wv": styles.colwise(),
        "attention.wo": styles.rowwise(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
    }


def feed_forward_plan(
    styles: TPStyles, *, prefix: str = "feed_forward"
) -> dict[str, ParallelStyle]:
    """The plan of a SwiGLU feed-forward at ``prefix`` (``w1``, ``w3`` column-wise, ``w2``
    row-wise), its input gathered from the sequence shards."""
    return {
        prefix: styles.prepare_input(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        ),
        f"{prefix}.w1": styles.colwise(),
        f"{prefix}.w2": styles.rowwise(output_layouts=Shard(1)),
        f"{prefix}.w3": styles.colwise(),
    }


class ReplicatedCompute(ParallelStyle):
    """Every TP rank runs the whole module on the same full input, with its parameters as
    replicated DTensors (so one optimizer steps them with the sharded ones).

    Inputs arrive as plain tensors and leave as plain tensors. Each rank computes the complete
    gradients, so they are replicated as they are: no collective runs. ``wrap_io=False`` is for
    modules that compute on their parameters' local tensors themselves (the grouped experts) or
    that already receive DTensors (deepseek_v3's latent projections).
    """

    def __init__(self, *, wrap_io: bool = True):
        super().__init__()
        self.wrap_io = wrap_io

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        """Replicate the parameters over ``device_mesh``; wrap inputs and outputs if asked."""
        if not self.wrap_io:
            return distribute_module(module, device_mesh)
        return distribute_module(
            module, device_mesh, input_fn=_replicated_input, output_fn=_local_output
        )


def _replicated_input(module: nn.Module, inputs: Any, device_mesh: DeviceMesh) -> Any:
    """The module's first input as a replicated DTensor (it is the same full tensor everywhere)."""
    first, *rest = inputs
    if not isinstance(first, DTensor):
        first = DTensor.from_local(first, device_mesh, (Replicate(),), run_check=False)
    return (first, *rest)


def _local_output(module: nn.Module, output: Any, device_mesh: DeviceMesh) -> Any:
    """The module's replicated DTensor output as the plain full tensor."""
    return output.to_local() if isinstance(output, DTensor) else output


def moe_plan(moe: nn.Module, *, moe_layout: MoELayout) -> dict[str, ParallelStyle]:
    """The TP plan of a block's MoE ``moe`` (at ``moe``) for ``moe_layout``
    (``ParallelDims.moe_layout``): :func:`token_split_moe_plan` when expert parallel takes the TP
    ranks, else :func:`replicated_moe_plan`, whose routed experts expert tensor parallel splits
    instead (``titan.distributed.expert_parallel.ExpertTensorParallel``)."""
    if moe_layout == "token_split":
        return token_split_moe_plan(moe)
    plan = replicated_moe_plan(moe)
    if moe_layout == "hidden_split":
        del plan["moe.experts"]
    return plan


def token_split_moe_plan(moe: nn.Module) -> dict[str, ParallelStyle]:
    """The plan of a block's MoE ``moe`` (at ``moe``) whose routed experts are split over an EP
    group that holds the TP ranks: each rank runs the MoE on its own sequence slice (the block's
    sequence-parallel input as it is), with the gate and the shared experts as replicated
    parameters whose gradients sum over the TP ranks. The experts themselves are left to
    expert parallel (``titan.distributed.expert_parallel``)."""
    plan: dict[str, ParallelStyle] = {
        "moe": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),), use_local_output=True
        ),
        # The router sees the slice's tokens flattened to [tokens, dim].
        "moe.router.gate": SequenceParallel(sequence_dim=0, use_local_output=True),
    }
    if moe.shared_experts is not None:
        # SwiGLU on the slice's flattened tokens: w1 and w3 hand w2 DTensors, w2 returns the
        # plain slice.
        for name in ("w1", "w3"):
            plan[f"moe.shared_experts.{name}"] = SequenceParallel(sequence_dim=0)
        plan["moe.shared_experts.w2"] = SequenceParallel(sequence_dim=0, use_local_output=True)
    return plan


def replicated_moe_plan(moe: nn.Module) -> dict[str, ParallelStyle]:
    """The plan of a block's MoE ``moe`` (at ``moe``) run whole on every TP rank: input gathered
    from the sequence shards, output cut back to this rank's sequence slice, parameters
    replicated."""
    plan: dict[str, ParallelStyle] = {
        "moe": PrepareModuleInputOutput(
            input_layouts=(Shard(1),),
            desired_input_layouts=(Replicate(),),
            use_local_input=True,
            output_layouts=(Replicate(),),
            desired_output_layouts=(Shard(1),),
            use_local_output=True,
        ),
        "moe.router.gate": ReplicatedCompute(),
        "moe.experts": ReplicatedCompute(wrap_io=False),
    }
    if moe.shared_experts is not None:
        for name in ("w1", "w2", "w3"):
            plan[f"moe.shared_experts.{name}"] = ReplicatedCompute()
    return plan
