"""gpt_oss's flavors, as torchtitan v0.2.2 defines them: one config factory per flavor name.

This table is the source of every gpt_oss flavor; ``schemas/flavor_table.py``, the torch-free
copy the validator and the migrator read, is generated from it (``make schema``).
"""

from __future__ import annotations

from collections.abc import Callable

from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssRoPE,
    GptOssTransformerBlock,
)


def gpt_oss(*, n_layers: int, num_experts: int, dim: int = 2880) -> GptOssModel.Config:
    """A gpt_oss model. torchtitan's 20b and 120b flavors set only the depth and the expert
    count, so their width, heads and expert size are the args' defaults (those of gpt-oss);
    the debug flavor narrows the model to 256 but keeps experts 2880 wide."""
    return GptOssModel.Config(
        dim=dim,
        n_layers=n_layers,
        vocab_size=201088,
        norm_eps=1e-5,
        max_seq_len=131072,
        max_batch_size=8,
        dtype="bf16",
        rope=GptOssRoPE.Config(
            theta=150000.0, original_seq_len=4096, rope_factor=32, ntk_alpha=1.0, ntk_beta=32.0
        ),
        layer=GptOssTransformerBlock.Config(
            attention=GptOssAttention.Config(
                n_heads=64,
                n_kv_heads=8,
                head_dim=64,
                sliding_window_size=128,
                attn_type="flex",
                attn_mask_type="causal",
            ),
            feed_forward=None,
            moe=GptOssMoE.Config(
                hidden_dim=2880,
                swiglu_limit=7.0,
                num_experts=num_experts,
                num_shared_experts=0,
                score_func="softmax",
                route_norm=True,
                route_scale=1.0,
                gate_bias=True,
                score_before_experts=False,
                top_k=4,
                use_grouped_mm=True,
                load_balance_coeff=1e-3,
            ),
        ),
    )


FLAVORS: dict[str, Callable[[], GptOssModel.Config]] = {
    "debugmodel": lambda: gpt_oss(dim=256, n_layers=4, num_experts=8),
    "20b": lambda: gpt_oss(n_layers=24, num_experts=32),
    "120b": lambda: gpt_oss(n_layers=36, num_experts=128),
}
"""Flavor name -> a fresh config of it, in torchtitan's order."""
