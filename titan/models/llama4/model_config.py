"""llama4's model config: llama-style blocks that interleave MoE layers, optional no-rope layers."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.models.common.attention import Attention, BaseAttention
from titan.models.common.decoder import (
    DEPTH_INIT_OF_INIT_STD,
    INIT_STD_OF_DEPTH_INIT,
    Decoder,
    TransformerBlock,
)
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE, moe_args, moe_fields_from_args
from titan.models.common.registry import check_arg_names
from titan.models.common.rope import LlamaRoPE, llama_rope_from_args, llama_rope_scaling_args
from titan.schemas.ranges import POSITIVE

# v0.2.2's TransformerModelArgs fields (llama4/model/args.py), in order.
ARG_NAMES = (
    "dim",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "vocab_size",
    "multiple_of",
    "ffn_dim_multiplier",
    "norm_eps",
    "rope_theta",
    "rope_scaling_args",
    "max_seq_len",
    "depth_init",
    "attn_type",
    "attn_mask_type",
    "every_n_layers_nope",
    "fixed_attn_block_size",
    "moe_args",
    "auto_scale_hidden_dim",
    "interleave_moe_layer_step",
)


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


def config_from_args(args: dict[str, Any]) -> Llama4Model.Config:
    """The config tree of a complete v0.2.2 llama4 args dict (``titan.schemas.flavors`` form)."""
    check_arg_names("llama4 model args", args, ARG_NAMES)
    return Llama4Model.Config(
        dim=args["dim"],
        n_layers=args["n_layers"],
        vocab_size=args["vocab_size"],
        norm_eps=args["norm_eps"],
        max_seq_len=args["max_seq_len"],
        rope=llama_rope_from_args(theta=args["rope_theta"], scaling_args=args["rope_scaling_args"]),
        layer=Llama4TransformerBlock.Config(
            attention=Llama4Attention.Config(
                n_heads=args["n_heads"],
                n_kv_heads=args["n_kv_heads"],
                attn_type=args["attn_type"],
                attn_mask_type=args["attn_mask_type"],
                every_n_layers_nope=args["every_n_layers_nope"],
                fixed_attn_block_size=args["fixed_attn_block_size"],
            ),
            feed_forward=FeedForward.Config(
                multiple_of=args["multiple_of"], ffn_dim_multiplier=args["ffn_dim_multiplier"]
            ),
            moe=MoE.Config(**moe_fields_from_args(args["moe_args"])),
            interleave_moe_layer_step=args["interleave_moe_layer_step"],
            auto_scale_hidden_dim=args["auto_scale_hidden_dim"],
            init_std=INIT_STD_OF_DEPTH_INIT[args["depth_init"]],
        ),
    )


def flavor_args(config: Llama4Model.Config) -> dict[str, Any]:
    """The v0.2.2 llama4 args dict ``config`` stands for (the inverse of ``config_from_args``)."""
    layer = config.layer
    attention, ffn, moe = layer.attention, layer.feed_forward, layer.moe
    if not isinstance(attention, Llama4Attention.Config) or ffn is None or moe is None:
        raise ValueError("a llama4 block has Llama4Attention, a feed-forward and an MoE")
    if ffn.hidden_dim is not None or moe.hidden_dim is not None:
        raise ValueError("llama4 derives its hidden sizes: set multiple_of, not hidden_dim")
    return {
        "dim": config.dim,
        "n_layers": config.n_layers,
        "n_heads": attention.n_heads,
        "n_kv_heads": attention.n_kv_heads,
        "vocab_size": config.vocab_size,
        "multiple_of": ffn.multiple_of,
        "ffn_dim_multiplier": ffn.ffn_dim_multiplier,
        "norm_eps": config.norm_eps,
        "rope_theta": config.rope.theta,
        "rope_scaling_args": llama_rope_scaling_args(config.rope),
        "max_seq_len": config.max_seq_len,
        "depth_init": DEPTH_INIT_OF_INIT_STD[layer.init_std],
        "attn_type": attention.attn_type,
        "attn_mask_type": attention.attn_mask_type,
        "every_n_layers_nope": attention.every_n_layers_nope,
        "fixed_attn_block_size": attention.fixed_attn_block_size,
        "moe_args": moe_args(moe),
        "auto_scale_hidden_dim": layer.auto_scale_hidden_dim,
        "interleave_moe_layer_step": layer.interleave_moe_layer_step,
    }
