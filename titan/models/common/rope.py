"""Rotary position embeddings shared by the decoder families."""

from __future__ import annotations

import dataclasses
from typing import Literal

from titan.config.configurable import Configurable
from titan.protocols.module import Module
from titan.schemas.ranges import POSITIVE, POSITIVE_NUMBER


class RoPE(Module):
    """Rotary position embedding without any context-length scaling (qwen3)."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Rotary position embedding."""

        _owner_path = "titan.models.common.attention_model:RoPE"
        _ranges = {"theta": POSITIVE_NUMBER}

        theta: float = 10000.0
        """Base of the rotary frequencies; larger values rotate slower and reach further."""


class LlamaRoPE(RoPE):
    """Rotary position embedding with llama 3's optional long-context frequency scaling."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(RoPE.Config):
        """Rotary position embedding, optionally scaled the llama 3.1 way."""

        _owner_path = "titan.models.common.attention_model:LlamaRoPE"
        _ranges = {
            "scaling_factor": POSITIVE_NUMBER,
            "low_freq_factor": POSITIVE_NUMBER,
            "high_freq_factor": POSITIVE_NUMBER,
            "original_max_position_embeddings": POSITIVE,
        }

        scaling: Literal["none", "llama"] = "none"
        """Frequency scaling: none, or llama 3.1's smooth low/high-frequency interpolation."""
        # The four scaling defaults are torchtitan's RoPEScalingArgs defaults, which every llama3
        # flavor uses as they are; they have no effect while scaling is "none".
        scaling_factor: float = 8.0
        """How much the low-frequency bands are slowed down (llama scaling only)."""
        low_freq_factor: float = 1.0
        """Wavelength bound, as a fraction of the original context, of the slowed bands."""
        high_freq_factor: float = 4.0
        """Wavelength bound, as a fraction of the original context, of the untouched bands."""
        original_max_position_embeddings: int = 8192
        """Context length the model was pretrained with before scaling."""
