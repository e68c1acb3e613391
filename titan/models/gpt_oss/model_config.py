"""gpt_oss's model config: sliding-window attention with sinks, clamped-SwiGLU experts, NTK rope."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Literal

from titan.models.common.attention import Attention
from titan.models.common.decoder import Decoder, TransformerBlock
from titan.models.common.moe import MoE, moe_args, moe_fields_from_args
from titan.models.common.registry import check_arg_names
from titan.models.common.rope import RoPE
from titan.schemas.ranges import POSITIVE, POSITIVE_NUMBER

# v0.2.2's GptOssModelArgs fields (gpt_oss/model/args.py), in order.
ARG_NAMES = (
    "max_batch_size",
    "max_seq_len",
    "dtype",
    "vocab_size",
    "dim",
    "moe_inter_dim",
    "n_layers",
    "norm_eps",
    "moe_args",
    "swiglu_limit",
    "head_dim",
    "n_heads",
    "n_kv_heads",
    "sliding_window_size",
    "attn_mask_type",
    "attn_type",
    "original_seq_len",
    "rope_theta",
    "rope_factor",
    "ntk_alpha",
    "ntk_beta",
)


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


def config_from_args(args: dict[str, Any]) -> GptOssModel.Config:
    """The config tree of a complete v0.2.2 gpt_oss args dict (``titan.schemas.flavors`` form)."""
    check_arg_names("gpt_oss model args", args, ARG_NAMES)
    return GptOssModel.Config(
        dim=args["dim"],
        n_layers=args["n_layers"],
        vocab_size=args["vocab_size"],
        norm_eps=args["norm_eps"],
        max_seq_len=args["max_seq_len"],
        max_batch_size=args["max_batch_size"],
        dtype=args["dtype"],
        rope=GptOssRoPE.Config(
            theta=args["rope_theta"],
            original_seq_len=args["original_seq_len"],
            rope_factor=args["rope_factor"],
            ntk_alpha=args["ntk_alpha"],
            ntk_beta=args["ntk_beta"],
        ),
        layer=GptOssTransformerBlock.Config(
            attention=GptOssAttention.Config(
                n_heads=args["n_heads"],
                n_kv_heads=args["n_kv_heads"],
                head_dim=args["head_dim"],
                sliding_window_size=args["sliding_window_size"],
                attn_type=args["attn_type"],
                attn_mask_type=args["attn_mask_type"],
            ),
            feed_forward=None,
            moe=GptOssMoE.Config(
                hidden_dim=args["moe_inter_dim"],
                swiglu_limit=args["swiglu_limit"],
                **moe_fields_from_args(args["moe_args"]),
            ),
        ),
    )


def flavor_args(config: GptOssModel.Config) -> dict[str, Any]:
    """The v0.2.2 gpt_oss args dict ``config`` stands for (the inverse of ``config_from_args``)."""
    layer, rope = config.layer, config.rope
    attention, moe = layer.attention, layer.moe
    if not isinstance(attention, GptOssAttention.Config) or not isinstance(moe, GptOssMoE.Config):
        raise ValueError("a gpt_oss block has GptOssAttention and a GptOssMoE")
    return {
        "max_batch_size": config.max_batch_size,
        "max_seq_len": config.max_seq_len,
        "dtype": config.dtype,
        "vocab_size": config.vocab_size,
        "dim": config.dim,
        "moe_inter_dim": layer.moe_hidden_dim(config.dim),
        "n_layers": config.n_layers,
        "norm_eps": config.norm_eps,
        "moe_args": moe_args(moe),
        "swiglu_limit": moe.swiglu_limit,
        "head_dim": attention.head_dim,
        "n_heads": attention.n_heads,
        "n_kv_heads": attention.n_kv_heads,
        "sliding_window_size": attention.sliding_window_size,
        "attn_mask_type": attention.attn_mask_type,
        "attn_type": attention.attn_type,
        "original_seq_len": rope.original_seq_len,
        "rope_theta": rope.theta,
        "rope_factor": rope.rope_factor,
        "ntk_alpha": rope.ntk_alpha,
        "ntk_beta": rope.ntk_beta,
    }
