"""Autocast for the forward pass: mixed precision when nothing else casts the parameters."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import torch
from torch._functorch import config as functorch_config

if TYPE_CHECKING:
    from titan.config.configs import TrainingConfig
    from titan.distributed.parallel_dims import ParallelDims

logger = logging.getLogger(__name__)

DTYPE_OF_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""The dtypes ``training.mixed_precision_param`` / ``mixed_precision_reduce`` name."""


def amp_context(
    parallel_dims: ParallelDims, *, training: TrainingConfig, device_type: str
) -> contextlib.AbstractContextManager[Any]:
    """The context to run forward in: ``torch.autocast`` to ``training.mixed_precision_param``
    when nothing else handles mixed precision (one process, or DDP) and that dtype differs from
    the parameters' ``training.dtype``; otherwise a no-op.

    FSDP casts parameters itself (MixedPrecisionPolicy). Under TP without FSDP, torchtitan runs
    in full precision (autocast and DTensor do not mix), and so does titan-train.
    """
    param_dtype = DTYPE_OF_NAME[training.mixed_precision_param]
    if param_dtype != DTYPE_OF_NAME[training.dtype] and not (
        parallel_dims.tp_enabled and not parallel_dims.fsdp_enabled
    ):
        _warn_if_the_cpu_emulates(param_dtype, device_type=device_type)
    if parallel_dims.fsdp_enabled:
        return contextlib.nullcontext()
    if parallel_dims.tp_enabled:
        logger.warning(
            "mixed precision under tensor parallel needs FSDP (data_parallel_shard_degree > 1); "
            "training in %s",
            training.dtype,
        )
        return contextlib.nullcontext()
    if param_dtype == DTYPE_OF_NAME[training.dtype]:
        return contextlib.nullcontext()
    return ForwardAutocast(device_type, dtype=param_dtype)


class ForwardAutocast(torch.autocast):
    """``torch.autocast`` around a forward pass whose backward runs outside it, as titan's
    trainer runs it (torchtitan's too), with torch.compile told so.

    AOTAutograd traces a compiled region's backward along with its forward, by default under the
    forward's autocast (``backward_pass_autocast = "same_as_forward"``), whereas the eager
    backward runs without autocast. The two differ wherever a forward op computes in float32
    inside autocast and its backward holds ops autocast lowers: SDPA's math path, which upcasts
    bfloat16 to float32 (deepseek_v3's query/key heads are wider than its values, so the CPU's
    fused kernel is out), got its backward matmuls in bfloat16 when compiled and in float32 when
    eager. Tracing the backward without autocast gives compiled blocks eager's gradients.
    """

    def __enter__(self) -> ForwardAutocast:
        """Enter autocast, with compiled backward graphs traced outside it."""
        self._backward_outside = functorch_config.patch(backward_pass_autocast="off")
        self._backward_outside.__enter__()
        return super().__enter__()

    def __exit__(self, *exc_info: Any) -> bool:
        """Leave autocast and restore the compiler's backward setting."""
        try:
            return super().__exit__(*exc_info)
        finally:
            self._backward_outside.__exit__(*exc_info)


def _warn_if_the_cpu_emulates(dtype: torch.dtype, *, device_type: str) -> None:
    """Say so when a CPU without bfloat16/float16 instructions would compute in ``dtype``.

    Without AVX512-BF16 / AMX (most AVX2 machines) oneDNN has no bfloat16 kernels and the matrix
    products fall back to a reference loop, an order of magnitude slower than float32.
    """
    if device_type != "cpu":
        return
    supported = {
        torch.bfloat16: torch.ops.mkldnn._is_mkldnn_bf16_supported,
        torch.float16: torch.ops.mkldnn._is_mkldnn_fp16_supported,
    }.get(dtype)
    if supported is not None and not supported():
        logger.warning(
            "this CPU has no %s matrix instructions, so mixed precision in %s runs emulated "
            'and far slower than float32; set training.mixed_precision_param = "float32" '
            "to train faster on it",
            str(dtype).removeprefix("torch."),
            str(dtype).removeprefix("torch."),
        )
