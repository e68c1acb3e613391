"""llama3's tensor-parallel plan; the generic steps (AC, compile, FSDP/DDP) are in
``titan.distributed.parallelize``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor.parallel import parallelize_module

from titan.distributed.tensor_parallel import (
    attention_plan,
    feed_forward_plan,
    parallelize_decoder_ends,
    tp_styles,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from titan.distributed.parallel_dims import MoELayout


def parallelize_llama(
    model: nn.Module,
    *,
    tp_mesh: DeviceMesh,
    loss_parallel: bool,
    float8_enabled: bool,
    moe_layout: MoELayout,
) -> None:
    """Shard the embeddings, every block's attention heads and feed-forward hidden units, and the
    output over ``tp_mesh``, with sequence parallel in between (``titan.distributed.
    tensor_parallel``). ``float8_enabled``: the linears are torchao float8 linears (tensorwise
    recipe), sharded with torchao's styles. ``moe_layout`` is moot: llama3 has no experts.
    """
    parallelize_decoder_ends(model, tp_mesh=tp_mesh, loss_parallel=loss_parallel)
    styles = tp_styles(float8_enabled)
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, attention_plan(styles) | feed_forward_plan(styles))
