"""deepseek_v3's flavors, as torchtitan v0.2.2 defines them: one config factory per flavor name.

This table is the source of every deepseek_v3 flavor; ``schemas/flavor_table.py``, the torch-free
copy the validator and the migrator read, is generated from it (``make schema``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.deepseek_v3.model_config import (
    DeepSeekV3Model,
    DeepSeekV3TransformerBlock,
    MLAttention,
    YaRNRoPE,
)


def deepseek_v3(
    *,
    vocab_size: int,
    dim: int,
    inter_dim: int,
    n_layers: int,
    n_dense_layers: int,
    n_heads: int,
    q_lora_rank: int,
    moe: MoE.Config,
    mscale: float = 1.0,
    flex: bool = True,
) -> DeepSeekV3Model.Config:
    """A deepseek_v3 model. Every flavor shares the latent attention's widths (kv rank 512, heads
    of 128 + 64 rope + 128 value) and YaRN rope (factor 40 beyond 4096 positions); ``flex``
    runs FlexAttention with block-causal masks, as all but the SDPA debug flavor do."""
    return DeepSeekV3Model.Config(
        dim=dim,
        n_layers=n_layers,
        vocab_size=vocab_size,
        norm_eps=1e-5,
        max_seq_len=16384,
        max_batch_size=8,
        expert_parallel_comm_backend="standard",
        rope=YaRNRoPE.Config(
            theta=10000.0,
            original_seq_len=4096,
            rope_factor=40,
            beta_fast=32,
            beta_slow=1,
            mscale=mscale,
        ),
        layer=DeepSeekV3TransformerBlock.Config(
            attention=MLAttention.Config(
                n_heads=n_heads,
                q_lora_rank=q_lora_rank,
                kv_lora_rank=512,
                qk_nope_head_dim=128,
                qk_rope_head_dim=64,
                v_head_dim=128,
                attn_type="flex" if flex else "sdpa",
                attn_mask_type="block_causal" if flex else "causal",
            ),
            feed_forward=FeedForward.Config(hidden_dim=inter_dim),
            moe=moe,
            n_dense_layers=n_dense_layers,
        ),
    )


def deepseek_moe(*, hidden_dim: int, **routing: Any) -> MoE.Config:
    """deepseek's experts: weights applied after the experts; ``routing`` sets the rest."""
    return MoE.Config(hidden_dim=hidden_dim, score_before_experts=False, **routing)


def _debugmodel(*, flex: bool) -> DeepSeekV3Model.Config:
    return deepseek_v3(
        vocab_size=2048,
        dim=256,
        inter_dim=1024,
        n_layers=6,
        n_dense_layers=1,
        n_heads=16,
        q_lora_rank=0,
        moe=deepseek_moe(
            hidden_dim=256,
            num_experts=8,
            num_shared_experts=2,
            top_k=3,
            score_func="softmax",
            route_norm=False,
        ),
        mscale=0.70,
        flex=flex,
    )


FLAVORS: dict[str, Callable[[], DeepSeekV3Model.Config]] = {
    "debugmodel": lambda: _debugmodel(flex=False),
    "debugmodel_flex_attn": lambda: _debugmodel(flex=True),
    "16B": lambda: deepseek_v3(
        vocab_size=102400,
        dim=2048,
        inter_dim=10944,
        n_layers=27,
        n_dense_layers=1,
        n_heads=16,
        q_lora_rank=0,
        moe=deepseek_moe(
            hidden_dim=1408,
            num_experts=64,
            num_shared_experts=2,
            top_k=6,
            score_func="softmax",
            route_norm=False,
        ),
        mscale=0.70,
    ),
    "236B": lambda: deepseek_v3(
        vocab_size=102400,
        dim=5120,
        inter_dim=12288,
        n_layers=60,
        n_dense_layers=1,
        n_heads=128,
        q_lora_rank=1536,
        moe=deepseek_moe(
            hidden_dim=1536,
            num_experts=160,
            num_shared_experts=2,
            top_k=6,
            num_expert_groups=8,
            num_limited_groups=3,
            score_func="softmax",
            route_norm=False,
            route_scale=16.0,
        ),
    ),
    "671B": lambda: deepseek_v3(
        vocab_size=129280,
        dim=7168,
        inter_dim=18432,
        n_layers=61,
        n_dense_layers=3,
        n_heads=128,
        q_lora_rank=1536,
        moe=deepseek_moe(
            hidden_dim=2048,
            num_experts=256,
            num_shared_experts=1,
            top_k=8,
            num_expert_groups=8,
            num_limited_groups=4,
            score_func="sigmoid",
            route_norm=True,
            route_scale=2.5,
        ),
    ),
}
"""Flavor name -> a fresh config of it, in torchtitan's order."""
