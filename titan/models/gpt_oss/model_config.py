"""gpt_oss's model config: sliding-window attention with sinks, clamped-SwiGLU experts, NTK rope."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

from titan.models.common.attention import Attention
from titan.models.common.decoder import Decoder, TransformerBlock
from titan.models.common.moe import MoE
from titan.models.common.rope import RoPE
from titan.schemas.ranges import POSITIVE, POSITIVE_NUMBER


class GptOssRoPE(RoPE):
    """Rotary position embedding extended with NTK-by-parts (YaRN) interpolation, gpt-oss style."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(RoPE.Config):
        """gpt-oss rope; rope_factor 1 leaves the frequencies unscaled."""

        _owner_path = "titan.models.gpt_oss.model:GptOssRoPE"
        _ranges = {"original_seq_len": POSITIVE, "rope_factor": POSITIVE_NUMBER}

        original_seq_len: int = 4096
        """Context length of pretraining, beyond which the frequencies are interpolated."""
        rope_factor: float = 1.0
        """Context extension factor; 1 leaves the frequencies as they are."""
        ntk_alpha: float = 1.0
        """Rotation count below which a frequency band is fully interpolated (YaRN's beta_slow)."""
        ntk_beta: float = 32.0
        """Rotation count above which a frequency band is left unscaled (YaRN's beta_fast)."""


class GptOssAttention(Attention):
    """Grouped-query attention with biases and per-head sinks; even layers use a sliding window."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Attention.Config):
        """gpt-oss attention with heads of width head_dim (not dim // n_heads)."""

        _owner_path = "titan.models.gpt_oss.model:GptOssAttention"
        _ranges = {"head_dim": POSITIVE, "sliding_window_size": POSITIVE}

        # torchtitan implements gpt-oss's sinks and sliding window with FlexAttention only.
        attn_type: Literal["flex"] = "flex"
        """Attention kernel; gpt-oss runs on FlexAttention only."""
        head_dim: int = 64
        """Width of one attention head, independent of the model width."""
        sliding_window_size: int = 128
        """How many past tokens the sliding-window layers (even layer indices) attend to."""

        def head_dim_for(self, dim: int) -> int:
            """Width of one head: ``head_dim``, whatever the model width."""
            return self.head_dim

        def num_params(self, dim: int) -> int:
            """Parameters of the q, k, v, output projections with their biases, and the sinks."""
            biases = self.head_dim * (self.n_heads + 2 * self.kv_heads()) + dim
            return Attention.Config.num_params(self, dim) + biases + self.n_heads


class GptOssMoE(MoE):
    """gpt-oss experts: SwiGLU with clamped inputs and biased projections."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(MoE.Config):
        """gpt-oss mixture of experts."""

        _owner_path = "titan.models.gpt_oss.model:GptOssMoE"

        # gpt-oss's clamp; the experts have no unclamped mode to default to.
        swiglu_limit: float = 7.0
        """Clamp applied to the experts' gate and linear inputs of the SwiGLU."""

        def num_params(self, dim: int, hidden_dim: int) -> int:
            """Parameters of router and experts, counting the experts' biases."""
            biases = self.num_experts * (2 * hidden_dim + dim)
            return MoE.Config.num_params(self, dim, hidden_dim) + biases


class GptOssTransformerBlock(TransformerBlock):
    """A gpt-oss block: its attention slides over a window on even layers, attends fully on odd."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(TransformerBlock.Config):
        """A gpt-oss block; the decoder builds it with the layer index, which picks the window."""

        _owner_path = "titan.models.gpt_oss.model:GptOssTransformerBlock"

        def expert_params(self, dim: int) -> int:
            """Parameters of one routed expert: mlp1 (gate and up) and mlp2, with biases."""
            hidden = self.moe_hidden_dim(dim)
            return 3 * dim * hidden + 2 * hidden + dim

        def uses_sliding_window(self, layer_id: int) -> bool:
            """Whether layer ``layer_id`` attends over the sliding window (even layers, as
            torchtitan's ``layer_id % 2 == 0`` and Hugging Face's ``layer_types``)."""
            return layer_id % 2 == 0


def _gpt_oss_block() -> GptOssTransformerBlock.Config:
    return GptOssTransformerBlock.Config(
        attention=GptOssAttention.Config(), feed_forward=None, moe=GptOssMoE.Config(hidden_dim=256)
    )


class GptOssModel(Decoder):
    """gpt-oss: every block is an MoE block; attention alternates sliding window and full."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Decoder.Config):
        """A gpt_oss model."""

        _owner_path = "titan.models.gpt_oss.model:GptOssModel"

        rope: GptOssRoPE.Config = field(default_factory=GptOssRoPE.Config)
        """NTK-by-parts rotary embedding."""
        layer: GptOssTransformerBlock.Config = field(default_factory=_gpt_oss_block)
        """The block every layer is built from: gpt-oss attention and MoE, no dense feed-forward."""
        max_batch_size: int = 8
        """Batch size of v0.2.2's inference caches; unused in training, kept for migration."""
        dtype: Literal["bf16", "fp8"] = "bf16"
        """Compute dtype listed in v0.2.2's model args, kept so migration is lossless."""
