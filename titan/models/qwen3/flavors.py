"""qwen3's flavors, as torchtitan v0.2.2 defines them: one config factory per flavor name.

This table is the source of every qwen3 flavor; ``schemas/flavor_table.py``, the torch-free
copy the validator and the migrator read, is generated from it (``make schema``).
"""

from __future__ import annotations

from collections.abc import Callable

from titan.models.common.decoder import TransformerBlock
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.common.rope import RoPE
from titan.models.qwen3.model_config import Qwen3Attention, Qwen3Model


def qwen3(
    *,
    dim: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    hidden_dim: int,
    vocab_size: int = 151936,
    max_seq_len: int = 4096,
    rope_theta: float = 1000000,
    tied: bool = False,
    moe: MoE.Config | None = None,
) -> Qwen3Model.Config:
    """A qwen3 model: heads of width 128 with q/k RMSNorm in every flavor; ``tied`` shares the
    output projection with the embeddings; ``moe`` makes every layer a mixture of experts."""
    return Qwen3Model.Config(
        dim=dim,
        n_layers=n_layers,
        vocab_size=vocab_size,
        norm_eps=1e-6,
        max_seq_len=max_seq_len,
        eos_id=151645,
        enable_weight_tying=tied,
        rope=RoPE.Config(theta=rope_theta),
        layer=TransformerBlock.Config(
            attention=Qwen3Attention.Config(
                n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=128, qk_norm="rms_norm"
            ),
            # Kept for MoE flavors too, where it is unused (as torchtitan keeps it).
            feed_forward=FeedForward.Config(hidden_dim=hidden_dim),
            moe=moe,
            init_std="by_layer",
        ),
    )


def qwen3_moe(*, num_experts: int, hidden_dim: int) -> MoE.Config:
    """qwen3's experts: top-8 of ``num_experts`` by softmax, renormalised, no shared expert."""
    return MoE.Config(
        hidden_dim=hidden_dim,
        num_experts=num_experts,
        num_shared_experts=0,
        score_func="softmax",
        route_norm=True,
        route_scale=1.0,
        score_before_experts=False,
        top_k=8,
    )


FLAVORS: dict[str, Callable[[], Qwen3Model.Config]] = {
    "debugmodel": lambda: qwen3(
        vocab_size=2048, dim=256, n_layers=8, n_heads=16, n_kv_heads=8, hidden_dim=3072, tied=True
    ),
    "0.6B": lambda: qwen3(
        dim=1024, n_layers=28, n_heads=16, n_kv_heads=8, hidden_dim=3072, tied=True
    ),
    "1.7B": lambda: qwen3(
        dim=2048, n_layers=28, n_heads=16, n_kv_heads=8, hidden_dim=6144, tied=True
    ),
    "4B": lambda: qwen3(
        dim=2560, n_layers=36, n_heads=32, n_kv_heads=8, hidden_dim=9728, tied=True
    ),
    "8B": lambda: qwen3(dim=4096, n_layers=36, n_heads=32, n_kv_heads=8, hidden_dim=12288),
    "14B": lambda: qwen3(dim=5120, n_layers=40, n_heads=40, n_kv_heads=8, hidden_dim=17408),
    "32B": lambda: qwen3(dim=5120, n_layers=64, n_heads=64, n_kv_heads=8, hidden_dim=25600),
    "debugmodel_moe": lambda: qwen3(
        vocab_size=2048,
        dim=256,
        n_layers=8,
        n_heads=16,
        n_kv_heads=8,
        hidden_dim=3072,
        moe=qwen3_moe(num_experts=64, hidden_dim=768),
    ),
    "30B-A3B": lambda: qwen3(
        max_seq_len=262144,
        dim=2048,
        n_layers=48,
        n_heads=32,
        n_kv_heads=4,
        hidden_dim=6144,
        moe=qwen3_moe(num_experts=128, hidden_dim=768),
    ),
    # torchtitan's comments on this flavor say its routing values "need double check".
    "235B-A22B": lambda: qwen3(
        dim=4096,
        n_layers=94,
        n_heads=64,
        n_kv_heads=4,
        hidden_dim=12288,
        rope_theta=5000000,
        moe=qwen3_moe(num_experts=128, hidden_dim=1536),
    ),
}
"""Flavor name -> a fresh config of it, in torchtitan's order."""
