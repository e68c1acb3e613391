"""llama3's flavors, as torchtitan v0.2.2 defines them: one config factory per flavor name.

This table is the source of every llama3 flavor; ``schemas/flavor_table.py``, the torch-free
copy the validator and the migrator read, is generated from it (``make schema``).
"""

from __future__ import annotations

from collections.abc import Callable

from titan.models.common.attention import Attention, AttentionBackend, AttentionMask
from titan.models.common.decoder import TransformerBlock
from titan.models.common.feed_forward import FeedForward
from titan.models.common.rope import LlamaRoPE
from titan.models.llama3.model_config import Llama3Model

# The attention kernel and mask of the flavors named *_flex / *_varlen (the rest run SDPA).
_KERNELS: dict[str, tuple[AttentionBackend, AttentionMask]] = {
    "sdpa": ("sdpa", "causal"),
    "flex": ("flex", "block_causal"),
    "varlen": ("varlen", "block_causal"),
}


def llama3(
    *,
    dim: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int | None = None,
    vocab_size: int = 128256,
    multiple_of: int = 256,
    ffn_dim_multiplier: float | None = None,
    rope_theta: float = 10000,
    kernel: str = "sdpa",
) -> Llama3Model.Config:
    """A llama3 model; what is not an argument is the same in every flavor (v0.2.2's defaults:
    llama 3.1 rope scaling, 131072 positions, depth-scaled init)."""
    attn_type, attn_mask_type = _KERNELS[kernel]
    return Llama3Model.Config(
        dim=dim,
        n_layers=n_layers,
        vocab_size=vocab_size,
        norm_eps=1e-5,
        max_seq_len=131072,
        eos_id=0,
        rope=LlamaRoPE.Config(theta=rope_theta, scaling="llama"),
        layer=TransformerBlock.Config(
            attention=Attention.Config(
                n_heads=n_heads,
                n_kv_heads=n_kv_heads,
                attn_type=attn_type,
                attn_mask_type=attn_mask_type,
            ),
            feed_forward=FeedForward.Config(
                multiple_of=multiple_of, ffn_dim_multiplier=ffn_dim_multiplier
            ),
            init_std="by_layer",
        ),
    )


def _debugmodel(kernel: str = "sdpa") -> Llama3Model.Config:
    return llama3(
        dim=256, n_layers=6, n_heads=16, vocab_size=2048, rope_theta=500000, kernel=kernel
    )


def _8b(kernel: str = "sdpa") -> Llama3Model.Config:
    return llama3(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        ffn_dim_multiplier=1.3,
        multiple_of=1024,
        rope_theta=500000,
        kernel=kernel,
    )


FLAVORS: dict[str, Callable[[], Llama3Model.Config]] = {
    "debugmodel": _debugmodel,
    "debugmodel_flex_attn": lambda: _debugmodel("flex"),
    "debugmodel_varlen_attn": lambda: _debugmodel("varlen"),
    "8B": _8b,
    "8B_flex": lambda: _8b("flex"),
    "8B_varlen": lambda: _8b("varlen"),
    "70B": lambda: llama3(
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        ffn_dim_multiplier=1.3,
        multiple_of=4096,
        rope_theta=500000,
    ),
    "405B": lambda: llama3(
        dim=16384,
        n_layers=126,
        n_heads=128,
        n_kv_heads=8,
        ffn_dim_multiplier=1.2,
        multiple_of=4096,
        rope_theta=500000,
    ),
}
"""Flavor name -> a fresh config of it, in torchtitan's order."""
