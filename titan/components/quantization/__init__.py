"""Quantization converters (float8 and MX through torchao)."""

from __future__ import annotations

from titan.config.configurable import NotBuildableError


def not_supported_yet(converter: str, *, what: str) -> NotBuildableError:
    """The error of a converter whose config titan reads but whose training it does not run."""
    return NotBuildableError(
        f"{what} ({converter}) is not supported by titan-train yet; remove it from "
        "model_converters.converters (the config itself is valid and can be validated and migrated)"
    )
