"""qwen3's model config: grouped-query attention with q/k norms and own head width; MoE or not."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

from titan.models.common.attention import Attention
from titan.models.common.decoder import (
    Decoder,
    TransformerBlock,
)
from titan.models.common.feed_forward import FeedForward
from titan.schemas.ranges import NON_NEGATIVE, POSITIVE


class Qwen3Attention(Attention):
    """Grouped-query attention with a head width of its own and RMS-normed queries and keys."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Attention.Config):
        """qwen3 attention: heads of width head_dim (not dim // n_heads), optional q/k norm."""

        _owner_path = "titan.models.qwen3.model:Qwen3Attention"
        _ranges = {"head_dim": POSITIVE}

        head_dim: int = 64
        """Width of one attention head, independent of the model width."""
        # On by default: it is what sets qwen3 attention apart, and every qwen3 flavor uses it.
        qk_norm: Literal["none", "rms_norm"] = "rms_norm"
        """Normalisation of each query and key head before rope."""

        def head_dim_for(self, dim: int) -> int:
            """Width of one head: ``head_dim``, whatever the model width."""
            return self.head_dim

        def num_params(self, dim: int) -> int:
            """Parameters of the q, k, v, output projections and the q/k norms."""
            norms = 2 * self.head_dim if self.qk_norm == "rms_norm" else 0
            return Attention.Config.num_params(self, dim) + norms


def _qwen3_block() -> TransformerBlock.Config:
    return TransformerBlock.Config(
        attention=Qwen3Attention.Config(), feed_forward=FeedForward.Config(hidden_dim=768)
    )


class Qwen3Model(Decoder):
    """Qwen3: dense or mixture-of-experts decoder, optionally tying output to embeddings."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Decoder.Config):
        """A qwen3 model; with ``layer.moe`` set, every block runs the MoE."""

        _owner_path = "titan.models.qwen3.model:Qwen3Model"
        _ranges = {"eos_id": NON_NEGATIVE}

        layer: TransformerBlock.Config = field(default_factory=_qwen3_block)
        """The block every layer is built from (qwen3 attention; MoE or dense feed-forward)."""
        eos_id: int = 0
        """End-of-sequence token id listed in v0.2.2's model args, kept so migration is lossless."""
        enable_weight_tying: bool = False
        """Whether the output projection shares its weight with the token embeddings."""

        def output_params(self) -> int:
            """Parameters of the output projection (none when tied to the embeddings)."""
            return 0 if self.enable_weight_tying else self.vocab_size * self.dim
