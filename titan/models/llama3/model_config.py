"""llama3's model config: a dense decoder of grouped-query attention blocks, llama-scaled rope."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from titan.models.common.attention import Attention
from titan.models.common.decoder import (
    DEPTH_INIT_OF_INIT_STD,
    INIT_STD_OF_DEPTH_INIT,
    Decoder,
    TransformerBlock,
)
from titan.models.common.feed_forward import FeedForward
from titan.models.common.registry import check_arg_names
from titan.models.common.rope import LlamaRoPE, llama_rope_from_args, llama_rope_scaling_args
from titan.schemas.ranges import NON_NEGATIVE

# v0.2.2's TransformerModelArgs fields (llama3/model/args.py), in order.
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
    "eos_id",
)


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


def config_from_args(args: dict[str, Any]) -> Llama3Model.Config:
    """The config tree of a complete v0.2.2 llama3 args dict (``titan.schemas.flavors`` form)."""
    check_arg_names("llama3 model args", args, ARG_NAMES)
    return Llama3Model.Config(
        dim=args["dim"],
        n_layers=args["n_layers"],
        vocab_size=args["vocab_size"],
        norm_eps=args["norm_eps"],
        max_seq_len=args["max_seq_len"],
        eos_id=args["eos_id"],
        rope=llama_rope_from_args(theta=args["rope_theta"], scaling_args=args["rope_scaling_args"]),
        layer=TransformerBlock.Config(
            attention=Attention.Config(
                n_heads=args["n_heads"],
                n_kv_heads=args["n_kv_heads"],
                attn_type=args["attn_type"],
                attn_mask_type=args["attn_mask_type"],
            ),
            feed_forward=FeedForward.Config(
                multiple_of=args["multiple_of"], ffn_dim_multiplier=args["ffn_dim_multiplier"]
            ),
            init_std=INIT_STD_OF_DEPTH_INIT[args["depth_init"]],
        ),
    )


def flavor_args(config: Llama3Model.Config) -> dict[str, Any]:
    """The v0.2.2 llama3 args dict ``config`` stands for (the inverse of ``config_from_args``)."""
    layer = config.layer
    attention, ffn = layer.attention, layer.feed_forward
    if not isinstance(attention, Attention.Config) or ffn is None or layer.moe is not None:
        raise ValueError("a llama3 block has grouped-query attention, a feed-forward and no MoE")
    if ffn.hidden_dim is not None:
        raise ValueError("llama3 computes its feed-forward size: set multiple_of, not hidden_dim")
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
        "eos_id": config.eos_id,
    }
