"""llama3's tensor-parallel plan; the generic steps (AC, compile, FSDP/DDP) are in
``titan.distributed.parallelize``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from titan.distributed.tensor_parallel import tp_styles

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def parallelize_llama(
    model: nn.Module, *, tp_mesh: DeviceMesh, loss_parallel: bool, float8_enabled: bool
) -> None:
    """Shard the matmuls over ``tp_mesh`` with sequence parallel in between.

    Activations between blocks are sharded on the sequence (dim 1); each block gathers them
    before attention / feed-forward and reduce-scatters after. With ``loss_parallel`` the output
    logits stay sharded on the vocabulary (a DTensor): compute the loss under
    ``torch.distributed.tensor.parallel.loss_parallel()``. ``float8_enabled``: the linears are
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
        parallelize_module(
            block,
            tp_mesh,
            {
                "attention_norm": SequenceParallel(),
                # freqs_cis (the second input) is a plain full tensor: left as it is.
                "attention": styles.prepare_input(
                    input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
                ),
                "attention.wq": styles.colwise(),
                "attention.wk": styles.colwise(),
                "attention.wv": styles.colwise(),
                "attention.wo": styles.rowwise(output_layouts=Shard(1)),
                "ffn_norm": SequenceParallel(),
                "feed_forward": styles.prepare_input(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                ),
                "feed_forward.w1": styles.colwise(),
                "feed_forward.w2": styles.rowwise(output_layouts=Shard(1)),
                "feed_forward.w3": styles.colwise(),
            },
        )
