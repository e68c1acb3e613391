"""qwen3's model config: grouped-query attention with q/k norms and own head width; MoE or not."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Literal

from titan.models.common.attention import Attention
from titan.models.common.decoder import (
    DEPTH_INIT_OF_INIT_STD,
    INIT_STD_OF_DEPTH_INIT,
    Decoder,
    TransformerBlock,
)
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE, moe_args, moe_fields_from_args
from titan.models.common.registry import check_arg_names
from titan.models.common.rope import RoPE
from titan.schemas.ranges import NON_NEGATIVE, POSITIVE

# v0.2.2's Qwen3ModelArgs fields (qwen3/model/args.py), in order.
ARG_NAMES = (
    "dim",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "vocab_size",
    "head_dim",
    "hidden_dim",
    "norm_eps",
    "rope_theta",
    "qk_norm",
    "max_seq_len",
    "depth_init",
    "attn_type",
    "attn_mask_type",
    "eos_id",
    "enable_weight_tying",
    "moe_enabled",
    "moe_inter_dim",
    "moe_args",
)
# What v0.2.2 writes for the unused MoE fields of a dense model: Qwen3ModelArgs' defaults.
_DENSE_MOE_INTER_DIM = 768
_QK_NORM_OF_ARG = {True: "rms_norm", False: "none"}
_ARG_OF_QK_NORM = {v: k for k, v in _QK_NORM_OF_ARG.items()}


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


def config_from_args(args: dict[str, Any]) -> Qwen3Model.Config:
    """The config tree of a complete v0.2.2 qwen3 args dict (``titan.schemas.flavors`` form)."""
    check_arg_names("qwen3 model args", args, ARG_NAMES)
    moe_fields = moe_fields_from_args(args["moe_args"])
    moe = MoE.Config(hidden_dim=args["moe_inter_dim"], **moe_fields)
    if not args["moe_enabled"]:
        if moe != MoE.Config(hidden_dim=_DENSE_MOE_INTER_DIM):
            # torchtitan ignores them; titan has nowhere to keep them for a dense model.
            raise ValueError("qwen3 model args: moe_inter_dim/moe_args set but moe_enabled=False")
        moe = None
    return Qwen3Model.Config(
        dim=args["dim"],
        n_layers=args["n_layers"],
        vocab_size=args["vocab_size"],
        norm_eps=args["norm_eps"],
        max_seq_len=args["max_seq_len"],
        eos_id=args["eos_id"],
        enable_weight_tying=args["enable_weight_tying"],
        rope=RoPE.Config(theta=args["rope_theta"]),
        layer=TransformerBlock.Config(
            attention=Qwen3Attention.Config(
                n_heads=args["n_heads"],
                n_kv_heads=args["n_kv_heads"],
                head_dim=args["head_dim"],
                qk_norm=_QK_NORM_OF_ARG[args["qk_norm"]],
                attn_type=args["attn_type"],
                attn_mask_type=args["attn_mask_type"],
            ),
            # torchtitan keeps hidden_dim for MoE models too (unused there); so does titan.
            feed_forward=FeedForward.Config(hidden_dim=args["hidden_dim"]),
            moe=moe,
            init_std=INIT_STD_OF_DEPTH_INIT[args["depth_init"]],
        ),
    )


def flavor_args(config: Qwen3Model.Config) -> dict[str, Any]:
    """The v0.2.2 qwen3 args dict ``config`` stands for (the inverse of ``config_from_args``)."""
    layer = config.layer
    attention, ffn, moe = layer.attention, layer.feed_forward, layer.moe
    if not isinstance(attention, Qwen3Attention.Config) or ffn is None:
        raise ValueError("a qwen3 block has Qwen3Attention and a feed-forward")
    return {
        "dim": config.dim,
        "n_layers": config.n_layers,
        "n_heads": attention.n_heads,
        "n_kv_heads": attention.n_kv_heads,
        "vocab_size": config.vocab_size,
        "head_dim": attention.head_dim,
        "hidden_dim": ffn.effective_hidden_dim(config.dim),
        "norm_eps": config.norm_eps,
        "rope_theta": config.rope.theta,
        "qk_norm": _ARG_OF_QK_NORM[attention.qk_norm],
        "max_seq_len": config.max_seq_len,
        "depth_init": DEPTH_INIT_OF_INIT_STD[layer.init_std],
        "attn_type": attention.attn_type,
        "attn_mask_type": attention.attn_mask_type,
        "eos_id": config.eos_id,
        "enable_weight_tying": config.enable_weight_tying,
        "moe_enabled": moe is not None,
        "moe_inter_dim": _DENSE_MOE_INTER_DIM if moe is None else layer.moe_hidden_dim(config.dim),
        "moe_args": moe_args(MoE.Config() if moe is None else moe),
    }
