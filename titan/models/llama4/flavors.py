"""llama4's flavors, as torchtitan v0.2.2 defines them: one config factory per flavor name.

This table is the source of every llama4 flavor; ``schemas/flavor_table.py``, the torch-free
copy the validator and the migrator read, is generated from it (``make schema``).
"""

from __future__ import annotations

from collections.abc import Callable

from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.common.rope import LlamaRoPE
from titan.models.llama4.model_config import Llama4Attention, Llama4Model, Llama4TransformerBlock


def llama4(
    *,
    dim: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int | None = None,
    vocab_size: int = 202048,
    multiple_of: int = 256,
    ffn_dim_multiplier: float | None = None,
    rope_theta: float = 10000,
    rope_scaled: bool = False,
    max_seq_len: int = 1048576,
    num_experts: int = 8,
    interleave_moe_layer_step: int = 2,
    irope: bool = False,
    fixed_attn_block_size: int = 8192,
) -> Llama4Model.Config:
    """A llama4 model. ``rope_scaled`` is llama4's own scaling (factor 16, both frequency bounds
    1); ``irope`` drops rope from every 4th layer and runs FlexAttention with block-causal
    masks, as the ``*_irope`` flavors do. Routing is top-1 sigmoid with one shared expert."""
    rope = LlamaRoPE.Config(theta=rope_theta)
    if rope_scaled:
        rope = LlamaRoPE.Config(
            theta=rope_theta,
            scaling="llama",
            scaling_factor=16.0,
            low_freq_factor=1.0,
            high_freq_factor=1.0,
            original_max_position_embeddings=8192,
        )
    return Llama4Model.Config(
        dim=dim,
        n_layers=n_layers,
        vocab_size=vocab_size,
        norm_eps=1e-5,
        max_seq_len=max_seq_len,
        rope=rope,
        layer=Llama4TransformerBlock.Config(
            attention=Llama4Attention.Config(
                n_heads=n_heads,
                n_kv_heads=n_kv_heads,
                attn_type="flex" if irope else "sdpa",
                attn_mask_type="block_causal" if irope else "causal",
                every_n_layers_nope=4 if irope else None,
                fixed_attn_block_size=fixed_attn_block_size,
            ),
            feed_forward=FeedForward.Config(
                multiple_of=multiple_of, ffn_dim_multiplier=ffn_dim_multiplier
            ),
            moe=MoE.Config(num_experts=num_experts),
            interleave_moe_layer_step=interleave_moe_layer_step,
            auto_scale_hidden_dim=True,
            init_std="by_layer",
        ),
    )


def _debugmodel(*, irope: bool = False) -> Llama4Model.Config:
    return llama4(
        dim=256,
        n_layers=6,
        n_heads=16,
        vocab_size=2048,
        rope_theta=500000,
        rope_scaled=True,
        irope=irope,
        fixed_attn_block_size=256 if irope else 8192,
    )


def _17b(*, num_experts: int, irope: bool = False) -> Llama4Model.Config:
    # The 16-expert model is the long-context one: scaled rope and every layer an MoE layer.
    sixteen = num_experts == 16
    return llama4(
        dim=5120,
        n_layers=48,
        n_heads=40,
        n_kv_heads=8,
        ffn_dim_multiplier=1.2,
        multiple_of=2048,
        rope_theta=500000,
        rope_scaled=sixteen,
        max_seq_len=10485760 if sixteen else 1048576,
        num_experts=num_experts,
        interleave_moe_layer_step=1 if sixteen else 2,
        irope=irope,
    )


FLAVORS: dict[str, Callable[[], Llama4Model.Config]] = {
    "debugmodel": _debugmodel,
    "17bx16e": lambda: _17b(num_experts=16),
    "17bx128e": lambda: _17b(num_experts=128),
    "debugmodel_irope": lambda: _debugmodel(irope=True),
    "17bx16e_irope": lambda: _17b(num_experts=16, irope=True),
    "17bx128e_irope": lambda: _17b(num_experts=128, irope=True),
}
"""Flavor name -> a fresh config of it, in torchtitan's order."""
