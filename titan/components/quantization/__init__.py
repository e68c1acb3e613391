"""Quantization converters (float8 and MX through torchao)."""

from __future__ import annotations

from titan.components._pending import not_yet
from titan.config.configurable import NotBuildableError


def not_supported_yet(converter: str, *, what: str) -> NotBuildableError:
    """The error of a converter whose config titan reads but whose training it does not run."""
    return not_yet(converter, what=what, fix="remove it from model_converters.converters")
