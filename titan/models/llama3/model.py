"""The torch module of a llama3 model (``Llama3Model.Config``'s ``_owner_path`` target)."""

from __future__ import annotations

from titan.models.common.model import Decoder
from titan.models.llama3 import model_config


class Llama3Model(Decoder):
    """Llama 3 / 3.1: a dense decoder of grouped-query attention blocks with SwiGLU.

    ``Llama3Model(config=cfg)`` (or ``cfg.build()``) builds every block with SDPA causal attention
    and llama-scaled rope; flavors with flex/varlen attention or MoE raise ``NotBuildableError``.
    """

    Config = model_config.Llama3Model.Config


__all__ = ["Llama3Model"]
