"""Model converters: passes that rewrite a model after it is built (float8, MX, ...)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import field
from typing import Any, ClassVar

from titan.config.configurable import Configurable

log = logging.getLogger(__name__)


class ModelConverter(Configurable):
    """Base of converters; ``quantization_type`` groups converters that must not be mixed."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Base of converter configs."""

        _quantization_type: ClassVar[str | None] = None
        _legacy_name: ClassVar[str | None] = None
        """The name this converter had in a legacy ``model.converters`` list."""

    def __init__(
        self, *, config: Config, parallel_dims: Any = None, model_compile_enabled: bool = False
    ) -> None:
        self.config = config
        self.parallel_dims = parallel_dims
        self.model_compile_enabled = model_compile_enabled

    def convert(self, model: Any) -> None:
        """Rewrite ``model`` in place (on the meta device, before parallelisation)."""

    def post_optimizer_hook(self, model_parts: list[Any]) -> None:
        """Run after every optimizer step (e.g. precompute float8 scales)."""


class ModelConvertersContainer(Configurable):
    """Applies its converters in order to every model part."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Which converters run, in order."""

        converters: list[ModelConverter.Config] = field(default_factory=list)
        """Converter configs applied in order after the model is built on the meta device."""
        print_after_conversion: bool = False
        """Log the model after the converters ran."""

    def __init__(
        self, *, config: Config, parallel_dims: Any = None, model_compile_enabled: bool = False
    ) -> None:
        check_converter_mix(config.converters)
        self.config = config
        self.converters: list[ModelConverter] = [
            converter.build(
                parallel_dims=parallel_dims, model_compile_enabled=model_compile_enabled
            )
            for converter in config.converters
        ]

    def convert(self, model: Any) -> None:
        """Apply every converter to ``model``, in order."""
        for converter in self.converters:
            converter.convert(model)
        if self.config.print_after_conversion:
            log.info("model after conversion:\n%s", model)

    def float8_tensorwise_linears(self) -> bool:
        """Whether linears become torchao float8 linears with the tensorwise recipe.

        Tensor parallel then needs torchao's float8 layouts instead of the plain ones.
        """
        return any(getattr(converter, "tensorwise_linears", False) for converter in self.converters)

    def post_optimizer_hook(self, model_parts: list[Any]) -> None:
        """Every converter's post-optimizer hook, in order."""
        for converter in self.converters:
            converter.post_optimizer_hook(model_parts)


def check_converter_mix(converters: list[ModelConverter.Config]) -> None:
    """Refuse a converter listed twice, and quantization families mixed in one model.

    torchtitan allows one quantization family per model (float8 or mx): their grouped-GEMM and
    linear rewrites assume their own tensor subclasses. The same converter twice would convert
    twice.
    """
    seen: set[type] = set()
    families: dict[str, str] = {}
    for converter in converters:
        kind = type(converter)
        name = kind._legacy_name or kind.__qualname__
        if kind in seen:
            raise ValueError(f"model_converters.converters lists {name} twice; keep one")
        seen.add(kind)
        family = kind._quantization_type
        if family is None:
            continue
        families.setdefault(family, name)
        if len(families) > 1:
            first, second = families.values()
            raise ValueError(
                f"model_converters.converters mixes quantization families: {first} "
                f"({list(families)[0]}) and {second} ({list(families)[1]}); one model uses one"
            )
