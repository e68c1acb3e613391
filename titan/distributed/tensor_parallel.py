"""The tensor-parallel styles every family's TP plan shards its linears with."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel


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
