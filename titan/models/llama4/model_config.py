"""llama4's model config: llama-style blocks that interleave MoE layers, optional no-rope layers."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from titan.models.common.attention import Attention, BaseAttention
from titan.models.common.decoder import (
    Decoder,
    TransformerBlock,
)
from titan.models.common.moe import MoE
from titan.models.common.rope import LlamaRoPE
from titan.schemas.ranges import POSITIVE


class Llama4Attention(Attention):
    """Grouped-query attention where some layers drop rope (iRoPE) and rope layers are chunked."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Attention.Config):
        """llama4 attention: rope layers attend within fixed chunks, no-rope layers globally."""

        _owner_path = "titan.models.llama4.model:Llama4Attention"
        _ranges = {"every_n_layers_nope": POSITIVE, "fixed_attn_block_size": POSITIVE}

        every_n_layers_nope: int | None = None
        """Layers whose index is a multiple of this skip rope (iRoPE); None: all use rope."""
        # torchtitan's default; longer than the default sequence, so it chunks nothing there.
        fixed_attn_block_size: int = 8192
        """Chunk length that rope layers attend within (flex attention only)."""


class Llama4TransformerBlock(TransformerBlock):
    """A llama4 block: every interleave_moe_layer_step-th layer runs the MoE."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(TransformerBlock.Config):
        """llama4 block; the MoE's expert size is derived from the dense feed-forward's."""

        _owner_path = "titan.models.llama4.model:Llama4TransformerBlock"
        _ranges = {"interleave_moe_layer_step": POSITIVE}

        attention: BaseAttention.Config = field(default_factory=Llama4Attention.Config)
        """Self-attention of the block."""
        moe: MoE.Config | None = field(default_factory=MoE.Config)
        """Mixture of experts of the MoE layers; None makes every layer dense."""
        interleave_moe_layer_step: int = 2
        """Layer i runs the MoE when (i + 1) is a multiple of this; 1 makes every layer MoE."""
        auto_scale_hidden_dim: bool = True
        """Divide the experts' hidden size by top_k + num_shared_experts to keep compute flat."""

        def uses_moe(self, layer_id: int) -> bool:
            """Whether layer ``layer_id`` is one of the interleaved MoE layers."""
            return self.moe is not None and (layer_id + 1) % self.interleave_moe_layer_step == 0

        def moe_hidden_dim(self, dim: int) -> int:
            """Expert hidden size: moe.hidden_dim, else torchtitan's llama4 derivation."""
            if self.moe is not None and self.moe.hidden_dim is not None:
                return self.moe.hidden_dim
            if self.feed_forward is None or self.moe is None:
                raise ValueError("llama4 derives the expert size from feed_forward and moe")
            ffn = self.feed_forward
            # As llama4's TransformerBlock: unlike the dense size, rounded only after scaling.
            hidden = int(2 * (4 * dim) / 3)
            if ffn.ffn_dim_multiplier is not None:
                hidden = int(ffn.ffn_dim_multiplier * hidden)
            if self.auto_scale_hidden_dim:
                hidden = int(hidden / (self.moe.top_k + self.moe.num_shared_experts))
            return hidden + -hidden % ffn.multiple_of


class Llama4Model(Decoder):
    """Llama 4: a decoder whose MoE layers alternate with dense ones, with optional iRoPE."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Decoder.Config):
        """A llama4 model."""

        _owner_path = "titan.models.llama4.model:Llama4Model"

        rope: LlamaRoPE.Config = field(default_factory=LlamaRoPE.Config)
        """Rotary position embedding, with llama-style scaling where a flavor has it."""
        layer: Llama4TransformerBlock.Config = field(default_factory=Llama4TransformerBlock.Config)
        """The block every layer is built from."""
