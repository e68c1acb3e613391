"""llama3's model config: a dense decoder of grouped-query attention blocks, llama-scaled rope."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from titan.models.common.decoder import (
    Decoder,
)
from titan.models.common.rope import LlamaRoPE
from titan.schemas.ranges import NON_NEGATIVE


class Llama3Model(Decoder):
    """Llama 3 / 3.1: a dense decoder with grouped-query attention and a SwiGLU feed-forward."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Decoder.Config):
        """A llama3 model; its block is a ``TransformerBlock`` with ``Attention``, no MoE."""

        _owner_path = "titan.models.llama3.model:Llama3Model"
        _ranges = {"eos_id": NON_NEGATIVE}

        rope: LlamaRoPE.Config = field(default_factory=LlamaRoPE.Config)
        """Rotary position embedding, with llama 3.1's optional long-context scaling."""
        eos_id: int = 0
        """End-of-sequence token id listed in v0.2.2's model args, kept so migration is lossless."""
