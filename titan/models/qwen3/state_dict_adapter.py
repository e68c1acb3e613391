"""Converts qwen3 state dicts between titan's names and Hugging Face's Qwen3 / Qwen3Moe.

qwen3 rotates head halves as Hugging Face does, so q/k weights keep their layout. What changes
besides the names:

- MoE experts: titan keeps one ``[E, ...]`` tensor per projection (``moe.experts.w1/w2/w3``);
  Hugging Face's checkpoints store each expert apart (``mlp.experts.{e}.gate_proj.weight``...).
- ``moe.expert_bias`` (load balancing) has no Hugging Face counterpart: export drops it, import
  gives zeros (Hugging Face routes unbiased).
- Tied embeddings: Hugging Face stores only ``model.embed_tokens.weight``; import fills
  ``output.weight`` from it.
"""

from __future__ import annotations

from typing import Any

from titan.models.common.hf_adapter import HF_ROTARY_TABLE, TOP_LEVEL_KEYS, HFStateDictAdapter
from titan.models.qwen3.model_config import Qwen3Attention, Qwen3Model

# titan name after ``layers.{i}.`` -> Hugging Face name after ``model.layers.{i}.``, for the
# tensors that only change name.
LAYER_KEYS = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "attention.q_norm.weight": "self_attn.q_norm.weight",
    "attention.k_norm.weight": "self_attn.k_norm.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "moe.router.gate.weight": "mlp.gate.weight",
}
# titan expert tensor -> the Hugging Face projection each expert's slice becomes.
EXPERT_KEYS = {
    "moe.experts.w1": "gate_proj",
    "moe.experts.w3": "up_proj",
    "moe.experts.w2": "down_proj",
}
HF_IGNORED_LAYER_KEYS = HF_ROTARY_TABLE


class Qwen3StateDictAdapter(HFStateDictAdapter):
    """Maps a qwen3 model's state dict to Hugging Face ``Qwen3ForCausalLM`` (dense) or
    ``Qwen3MoeForCausalLM`` (MoE) names and back."""

    family = "qwen3"
    layer_keys = LAYER_KEYS
    expert_keys = EXPERT_KEYS
    titan_only_layer_keys = ("moe.expert_bias",)
    hf_ignored_layer_keys = HF_IGNORED_LAYER_KEYS
    zero_expert_bias = True

    def __init__(self, *, model_config: Qwen3Model.Config, hf_assets_path: str | None):
        super().__init__(model_config=model_config, hf_assets_path=hf_assets_path)
        self.tied = model_config.enable_weight_tying

    def check_model(self, model_config: Qwen3Model.Config) -> None:
        """Qwen3Attention, and an MoE that Hugging Face's Qwen3Moe routes the same way."""
        layer = model_config.layer
        if not isinstance(layer.attention, Qwen3Attention.Config):
            raise ValueError("a qwen3 block has Qwen3Attention")
        if layer.moe is not None:
            _check_hf_routing(layer.moe)

    def top_level_to_hf(self, key: str, value: Any, hf: dict[str, Any]) -> None:
        """A tied ``output.weight`` is the embedding, which Hugging Face stores once."""
        if not (self.tied and key == "output.weight"):
            super().top_level_to_hf(key, value, hf)

    def finish_from_hf(self, state: dict[str, Any], hf_state_dict: dict[str, Any]) -> None:
        """A tied model's ``output.weight`` is its embedding."""
        if self.tied and "output.weight" not in state and "tok_embeddings.weight" in state:
            state["output.weight"] = state["tok_embeddings.weight"]

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """The Hugging Face ``Qwen3Config`` / ``Qwen3MoeConfig`` of this model, for config.json."""
        config = self.model_config
        layer = config.layer
        attention = layer.attention
        assert isinstance(attention, Qwen3Attention.Config)  # checked in __init__
        ffn = layer.feed_forward
        common = {
            "hidden_size": config.dim,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": attention.n_heads,
            "num_key_value_heads": attention.kv_heads(),
            "head_dim": attention.head_dim,
            "vocab_size": config.vocab_size,
            "max_position_embeddings": config.max_seq_len,
            "rms_norm_eps": config.norm_eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": config.rope.theta},
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "tie_word_embeddings": config.enable_weight_tying,
            "initializer_range": 0.02,
            "eos_token_id": config.eos_id,
            "torch_dtype": torch_dtype,
        }
        if ffn is not None:
            common["intermediate_size"] = ffn.effective_hidden_dim(config.dim)
        moe = layer.moe
        if moe is None:
            return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **common}
        return {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            **common,
            "moe_intermediate_size": layer.moe_hidden_dim(config.dim),
            "num_experts": moe.num_experts,
            "num_experts_per_tok": moe.top_k,
            "norm_topk_prob": moe.route_norm,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        }


def _check_hf_routing(moe: Any) -> None:
    """Refuse an MoE that Hugging Face's Qwen3Moe cannot express (it would compute otherwise)."""
    problems = []
    if moe.score_func != "softmax":
        problems.append(f"score_func {moe.score_func!r} (Hugging Face: softmax)")
    if moe.route_scale != 1.0:
        problems.append(f"route_scale {moe.route_scale} (Hugging Face: 1.0)")
    if moe.num_shared_experts:
        problems.append(f"{moe.num_shared_experts} shared experts (Hugging Face: none)")
    if moe.score_before_experts:
        problems.append("scores applied before the experts (Hugging Face: after)")
    if moe.gate_bias:
        problems.append("a router bias (Hugging Face: none)")
    if moe.num_expert_groups is not None:
        problems.append("group-limited routing (Hugging Face: none)")
    if problems:
        raise ValueError(
            "this qwen3 MoE has no Hugging Face Qwen3Moe equivalent: " + "; ".join(problems)
        )


__all__ = [
    "EXPERT_KEYS",
    "HF_IGNORED_LAYER_KEYS",
    "LAYER_KEYS",
    "Qwen3StateDictAdapter",
    "TOP_LEVEL_KEYS",
]
