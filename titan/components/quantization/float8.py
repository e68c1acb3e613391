"""Float8 training through torchao: linear layers and MoE grouped GEMMs.

torch and torchao are imported when a converter is built, never when its config is read.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import field
from typing import Any, ClassVar, Literal

from titan.components.optional_packages import require_package
from titan.components.quantization import not_supported_yet
from titan.protocols.model_converter import ModelConverter

log = logging.getLogger(__name__)

AUTO_FILTER = "auto_filter_small_kn"
"""The ``filter_fqns`` entry that asks torchao to skip linears too small to gain from float8."""


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

    def __init__(
        self, *, config: Config, parallel_dims: Any = None, model_compile_enabled: bool = False
    ) -> None:
        super().__init__(
            config=config, parallel_dims=parallel_dims, model_compile_enabled=model_compile_enabled
        )
        require_package(
            "torchao",
            needed_for="float8 training (Float8LinearConverter)",
            install="pip install 'titan[float8]'",
        )
        if config.emulate and model_compile_enabled:
            raise ValueError(
                "float8 emulate=true runs in eager mode only: turn off compile for the model, "
                "or train on a float8 GPU with emulate=false"
            )
        if not config.emulate and not _has_float8_gpu():
            raise ValueError(
                "float8 training needs an NVIDIA GPU of compute capability 8.9 or newer "
                "(SM89+: Ada, Hopper, Blackwell); set emulate=true to check float8 numerics "
                "without one (slow, eager mode only)"
            )
        self.torchao_config = _torchao_config(config)
        self.module_filter = _module_filter(config)
        self.fsdp_enabled = bool(getattr(parallel_dims, "dp_shard_enabled", False))
        # Tensor parallel needs torchao's float8 layouts for tensorwise-scaled linears only.
        self.tensorwise_linears = config.recipe_name in (None, "tensorwise")
        if model_compile_enabled and config.recipe_name == "rowwise":
            import torch._inductor.config

            # torchtitan's stopgap for pytorch/pytorch#150859: compiled rowwise casts must round
            # like eager ones.
            torch._inductor.config.emulate_precision_casts = True

    def convert(self, model: Any) -> None:
        """Swap the selected ``nn.Linear`` modules of ``model`` for torchao ``Float8Linear``."""
        from torchao.float8 import convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear

        convert_to_float8_training(
            model, config=self.torchao_config, module_filter_fn=self.module_filter
        )
        swapped = sum(isinstance(module, Float8Linear) for module in model.modules())
        log.info(
            "float8: %d linear layers converted (recipe %s, emulate %s, fsdp float8 all-gather %s)",
            swapped,
            self.config.recipe_name or "tensorwise",
            self.config.emulate,
            self.config.enable_fsdp_float8_all_gather,
        )

    def post_optimizer_hook(self, model_parts: list[Any]) -> None:
        """Precompute the float8 weight scales of FSDP shards with one all-reduce, when asked."""
        if not (self.config.precompute_float8_dynamic_scale_for_fsdp and self.fsdp_enabled):
            return
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        for part in model_parts:
            precompute_float8_dynamic_scale_for_fsdp(part)


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
        raise not_supported_yet(
            "Float8GroupedMMConverter", what="float8 grouped GEMMs for MoE layers"
        )


def _has_float8_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _torchao_config(config: Float8LinearConverter.Config) -> Any:
    """torchao's ``Float8LinearConfig`` for ``config`` (its recipe, unset meaning tensorwise)."""
    from torchao.float8 import Float8LinearConfig

    try:
        base = (
            Float8LinearConfig.from_recipe_name(config.recipe_name)
            if config.recipe_name is not None
            else Float8LinearConfig()
        )
        # replace() re-runs torchao's checks, e.g. the float8 all-gather is tensorwise only.
        return dataclasses.replace(
            base,
            emulate=config.emulate,
            enable_fsdp_float8_all_gather=config.enable_fsdp_float8_all_gather,
        )
    except AssertionError as error:
        raise ValueError(f"float8 options do not work together: {error}") from None


def _module_filter(config: Float8LinearConverter.Config) -> Any:
    """``module_filter_fn(module, fqn) -> bool``: which modules become float8 linears."""
    fragments = [fqn for fqn in config.filter_fqns if fqn != AUTO_FILTER]
    if AUTO_FILTER in config.filter_fqns:
        try:
            from torchao.float8 import _auto_filter_for_recipe
        except ImportError:
            log.warning("this torchao has no %s; filtering by name and size only", AUTO_FILTER)
        else:
            return _auto_filter_for_recipe(config.recipe_name or "tensorwise", fragments)
    return functools.partial(convertible_linear, fragments=tuple(fragments))


def convertible_linear(module: Any, fqn: str, *, fragments: tuple[str, ...]) -> bool:
    """An ``nn.Linear`` whose name contains none of ``fragments`` and whose dims fit float8.

    torchtitan's rule: float8 tensor-core GEMMs need both weight dims divisible by 16.
    """
    import torch.nn as nn

    if not isinstance(module, nn.Linear):
        return False
    out_features, in_features = module.weight.shape
    if out_features % 16 or in_features % 16:
        return False
    return not any(fragment in fqn for fragment in fragments)
