"""MX (microscaling) training through torchao: linear layers and MoE grouped GEMMs."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, ClassVar, Literal

from titan.components.quantization import not_supported_yet
from titan.protocols.model_converter import ModelConverter


class MXLinearConverter(ModelConverter):
    """Swaps ``nn.Linear`` layers for torchao MX linears."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ModelConverter.Config):
        """MX linear options (legacy ``[quantize.linear.mx]``)."""

        _quantization_type: ClassVar[str | None] = "mx"
        _legacy_name: ClassVar[str | None] = "quantize.linear.mx"

        mxfp8_dim1_cast_kernel_choice: Literal["triton", "cuda", "torch"] = "triton"
        """Kernel used for the dim-1 cast."""
        recipe_name: str = "mxfp8_cublas"
        """MX recipe name of torchao."""
        filter_fqns: list[str] = field(default_factory=lambda: ["output"])
        """Module name fragments to leave unconverted."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_supported_yet("MXLinearConverter", what="MX (microscaling) linear training")


class MXGroupedMMConverter(ModelConverter):
    """Runs the grouped GEMMs of MoE layers in MX."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ModelConverter.Config):
        """MX grouped GEMM options (legacy ``[quantize.grouped_mm.mx]``)."""

        _quantization_type: ClassVar[str | None] = "mx"
        _legacy_name: ClassVar[str | None] = "quantize.grouped_mm.mx"

        recipe_name: Literal["mxfp8"] = "mxfp8"
        """MX recipe for grouped GEMMs."""
        fqns: list[str] | str = field(default_factory=list)
        """MoE module name fragments whose grouped GEMMs run in MX."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_supported_yet("MXGroupedMMConverter", what="MX grouped GEMMs for MoE layers")
