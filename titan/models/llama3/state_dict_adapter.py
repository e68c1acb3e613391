"""Converts llama3 state dicts between titan's names and Hugging Face's ``LlamaForCausalLM``.

Two differences besides the names: Hugging Face's rotary embedding rotates the two *halves* of
a head (``rotate_half``), while titan, like Meta's reference, rotates *adjacent pairs* as complex
numbers. The q and k projections are therefore stored with their output rows permuted, the same
permutation Hugging Face's ``convert_llama_weights_to_hf.py`` applies.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

from typing import Any

from titan.models.common.attention import Attention
from titan.models.common.hf_adapter import HF_ROTARY_TABLE, TOP_LEVEL_KEYS, HFStateDictAdapter
from titan.models.llama3.model_config import Llama3Model

# titan name after ``layers.{i}.`` -> Hugging Face name after ``model.layers.{i}.``.
LAYER_KEYS = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
HF_IGNORED_LAYER_KEYS = HF_ROTARY_TABLE


def to_hf_rotary_layout(weight: Any, n_heads: int) -> Any:
    """Reorder each head's output rows from adjacent pairs ``(x0, x1), ...`` to two halves."""
    rows, cols = weight.shape
    return weight.view(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def from_hf_rotary_layout(weight: Any, n_heads: int) -> Any:
    """The inverse of ``to_hf_rotary_layout``: two halves back to adjacent pairs."""
    rows, cols = weight.shape
    return weight.view(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


class Llama3StateDictAdapter(HFStateDictAdapter):
    """Maps a llama3 model's state dict to Hugging Face Llama names and back (q and k rows
    moved between the two rotary layouts)."""

    family = "llama3"
    layer_keys = LAYER_KEYS
    hf_ignored_layer_keys = HF_IGNORED_LAYER_KEYS

    def __init__(self, *, model_config: Llama3Model.Config, hf_assets_path: str | None):
        super().__init__(model_config=model_config, hf_assets_path=hf_assets_path)
        attention = model_config.layer.attention
        self.n_heads = attention.n_heads
        self.n_kv_heads = attention.kv_heads()
        # Head count of each projection whose rows follow the rotary layout.
        self._rotary_heads = {
            "attention.wq.weight": self.n_heads,
            "attention.wk.weight": self.n_kv_heads,
        }

    def check_model(self, model_config: Llama3Model.Config) -> None:
        """A llama3 block: grouped-query attention, a feed-forward, no MoE."""
        layer = model_config.layer
        dense = layer.feed_forward is not None and layer.moe is None
        if not isinstance(layer.attention, Attention.Config) or not dense:
            raise ValueError(
                "a llama3 block has grouped-query attention, a feed-forward and no MoE"
            )

    def relayout(self, name: str, value: Any, *, to_hf: bool) -> Any:
        """q and k rows in the target's rotary layout; other tensors unchanged."""
        heads = self._rotary_heads.get(name)
        if heads is None:
            return value
        return (to_hf_rotary_layout if to_hf else from_hf_rotary_layout)(value, heads)

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """The Hugging Face ``LlamaConfig`` of this model, for an export folder's config.json."""
        config = self.model_config
        ffn = config.layer.feed_forward
        assert ffn is not None  # checked in __init__
        rope = config.rope
        rope_scaling = None
        if rope.scaling == "llama":
            rope_scaling = {
                "rope_type": "llama3",
                "factor": rope.scaling_factor,
                "low_freq_factor": rope.low_freq_factor,
                "high_freq_factor": rope.high_freq_factor,
                "original_max_position_embeddings": rope.original_max_position_embeddings,
            }
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": config.dim,
            "intermediate_size": ffn.effective_hidden_dim(config.dim),
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": config.dim // self.n_heads,
            "vocab_size": config.vocab_size,
            "max_position_embeddings": config.max_seq_len,
            "rms_norm_eps": config.norm_eps,
            "rope_theta": rope.theta,
            "rope_scaling": rope_scaling,
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "eos_token_id": config.eos_id,
            "torch_dtype": torch_dtype,
        }


__all__ = [
    "HF_IGNORED_LAYER_KEYS",
    "LAYER_KEYS",
    "Llama3StateDictAdapter",
    "TOP_LEVEL_KEYS",
    "from_hf_rotary_layout",
    "to_hf_rotary_layout",
]
