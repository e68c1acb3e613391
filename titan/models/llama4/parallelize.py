"""llama4's tensor-parallel plan; the generic steps (AC, compile, FSDP/DDP) are in
``titan.distributed.parallelize``.

Embeddings, attention and the dense layers' SwiGLU are sharded as torchtitan v0.2.2's
``apply_non_moe_tp`` shards them, with sequence parallel between the blocks. Each attention
gathers the whole sequence before it runs, so the chunked and global masks see every position.

The MoE layers run *replicated* across the TP ranks: each gathers the whole sequence, routes it,
runs the router, the experts and the shared expert on all of it, and keeps its own sequence slice
of the output; the backward pass gathers the output gradient back, so every rank computes the
same full gradients. The MoE parameters are replicated DTensors (computed with as plain local
tensors), so clipping, optimizers and FSDP see one kind of parameter. This spends the TP ranks'
compute on duplicate expert work instead of sharding the experts' hidden dimension as
torchtitan's ``apply_moe_ep_tp`` does; the math stays exactly the one-process math.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from titan.distributed.tensor_parallel import tp_styles

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class ReplicatedParameters(ParallelStyle):
    """Make a module's own parameters replicated DTensors; with ``local_io`` its plain inputs
    are wrapped as replicated DTensors and its outputs unwrapped, so it computes as before."""

    def __init__(self, *, local_io: bool):
        super().__init__()
        self.local_io = local_io

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        """Distribute ``module``'s parameters (and inputs/outputs) over ``device_mesh``."""

        def replicate(name: str, mod: nn.Module, mesh: DeviceMesh) -> None:
            for param_name, param in list(mod.named_parameters(recurse=False)):
                replicated = distribute_tensor(param, mesh, [Replicate()])
                mod.register_parameter(param_name, nn.Parameter(replicated))

        def wrap_inputs(mod: nn.Module, inputs: Any, mesh: DeviceMesh) -> Any:
            return tuple(DTensor.from_local(x, mesh, [Replicate()]) for x in inputs)

        def unwrap_output(mod: nn.Module, output: Any, mesh: DeviceMesh) -> Any:
            return output.to_local()

        if not self.local_io:
            return distribute_module(module, device_mesh, replicate)
        return distribute_module(module, device_mesh, replicate, wrap_inputs, unwrap_output)


def parallelize_llama4(
    model: nn.Module, *, tp_mesh: DeviceMesh, loss_parallel: bool, float8_enabled: bool
) -> None:
    """Shard llama4's attention and dense matmuls over ``tp_mesh``; replicate its MoE layers.

    Activations between blocks are sharded on the sequence (dim 1). With ``loss_parallel`` the
    output logits stay sharded on the vocabulary (a DTensor). ``float8_enabled``: the linears are
    torchao float8 linears (tensorwise recipe), sharded with torchao's styles.
    """
    parallelize_module(
        model,
        tp_mesh,
        {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(
                input_layouts=Shard(1),
                output_layouts=Shard(-1) if loss_parallel else Replicate(),
                use_local_output=not loss_parallel,
            ),
        },
    )
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        plan: dict[str, ParallelStyle] = {
            "attention_norm": SequenceParallel(),
            # The rotary table (the second input) is a plain full tensor: left as it is.
            "attention": styles.prepare_input(
                input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
            ),
            "attention.wq": styles.colwise(),
            "attention.wk": styles.colwise(),
            "attention.wv": styles.colwise(),
            "attention.wo": styles.rowwise(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
        }
        if block.moe_enabled:
            plan.update(moe_plan(block.moe))
        else:
            plan["feed_forward"] = styles.prepare_input(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
            plan["feed_forward.w1"] = styles.colwise()
            plan["feed_forward.w2"] = styles.rowwise(output_layouts=Shard(1))
            plan["feed_forward.w3"] = styles.colwise()
        parallelize_module(block, tp_mesh, plan)


def moe_plan(moe: nn.Module) -> dict[str, ParallelStyle]:
    """The replicated plan of one MoE layer, keyed by paths inside its block."""
    plan: dict[str, ParallelStyle] = {
        # Gather the sequence in, keep this rank's slice of the (identical) output.
        "moe": PrepareModuleInputOutput(
            input_layouts=(Shard(1),),
            desired_input_layouts=(Replicate(),),
            use_local_input=True,
            output_layouts=(Replicate(),),
            desired_output_layouts=(Shard(1),),
            use_local_output=True,
        ),
        "moe.router.gate": ReplicatedParameters(local_io=True),
        # The grouped experts compute with their parameters' local tensors themselves.
        "moe.experts": ReplicatedParameters(local_io=False),
    }
    if moe.shared_experts is not None:
        for name in ("w1", "w2", "w3"):
            plan[f"moe.shared_experts.{name}"] = ReplicatedParameters(local_io=True)
    return plan


__all__ = ["ReplicatedParameters", "moe_plan", "parallelize_llama4"]
