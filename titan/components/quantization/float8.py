"""Float8 training through torchao: linear layers and MoE grouped GEMMs."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, ClassVar, Literal

from titan.components._pending import not_yet
from titan.protocols.model_converter import ModelConverter


class Float8LinearConverter(ModelConverter):
    """Swaps ``nn.Linear`` layers for torchao float8 linears."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ModelConverter.Config):
        """Float8 linear options (legacy ``[quantize.linear.float8]``)."""

        _quantization_type: ClassVar[str | None] = "float8"
        _legacy_name: ClassVar[str | None] = "quantize.linear.float8"

        enable_fsdp_float8_all_gather: bool = False
        """All-gather FSDP parameters in float8 (tensorwise recipe only)."""
        precompute_float8_dynamic_scale_for_fsdp: bool = False
        """Precompute float8 scales with one all-reduce (needs the float8 all-gather)."""
        recipe_name: Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"] | None = None
        """Float8 recipe of torchao; unset means tensorwise."""
        filter_fqns: list[str] = field(default_factory=list)
        """Module name fragments to leave unconverted; auto_filter_small_kn enables torchao's filter."""
        emulate: bool = False
        """Emulate float8 for testing on hardware without float8 support (not with compile)."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("Float8LinearConverter")


class Float8GroupedMMConverter(ModelConverter):
    """Runs the grouped GEMMs of MoE layers in float8."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ModelConverter.Config):
        """Float8 grouped GEMM options (legacy ``[quantize.grouped_mm.float8]``)."""

        _quantization_type: ClassVar[str | None] = "float8"
        _legacy_name: ClassVar[str | None] = "quantize.grouped_mm.float8"

        fqns: list[str] | str = field(default_factory=list)
        """MoE module name fragments whose grouped GEMMs run in float8."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("Float8GroupedMMConverter")
