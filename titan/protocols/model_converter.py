"""Model converters: passes that rewrite a model after it is built (float8, MX, ...)."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, ClassVar

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class ModelConverter(Configurable):
    """Base of converters; ``quantization_type`` groups converters that must not be mixed."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Base of converter configs."""

        _quantization_type: ClassVar[str | None] = None
        _legacy_name: ClassVar[str | None] = None
        """The name this converter had in a legacy ``model.converters`` list."""


class ModelConvertersContainer(Configurable):
    """Applies its converters in order to every model part."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Which converters run, in order."""

        converters: list[ModelConverter.Config] = field(default_factory=list)
        """Converter configs applied in order after the model is built on the meta device."""
        print_after_conversion: bool = False
        """Log the model after the converters ran."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("ModelConvertersContainer")
