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

import functools
import re
from typing import Any

import torch

from titan.models.common.hf_adapter import (
    HF_LAYER,
    TITAN_LAYER,
    TOP_LEVEL_KEYS,
    hf_storage_reader,
    inverted,
    lookup,
    read_shard_index,
)
from titan.models.qwen3.model_config import Qwen3Attention, Qwen3Model

# Unknown names are refused as not qwen3 keys.
_lookup = functools.partial(lookup, family="qwen3")
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
_FROM_HF_LAYER_KEYS = inverted(LAYER_KEYS)
_FROM_HF_TOP_LEVEL_KEYS = inverted(TOP_LEVEL_KEYS)
_FROM_HF_EXPERT_KEYS = inverted(EXPERT_KEYS)
_HF_EXPERT = re.compile(r"mlp\.experts\.(\d+)\.(\w+)\.weight")
# Old Hugging Face checkpoints store the rotary table; titan recomputes it.
HF_IGNORED_LAYER_KEYS = ("self_attn.rotary_emb.inv_freq",)


class Qwen3StateDictAdapter:
    """Maps a qwen3 model's state dict to Hugging Face ``Qwen3ForCausalLM`` (dense) or
    ``Qwen3MoeForCausalLM`` (MoE) names and back.

    ``hf_assets_path`` is the folder of a Hugging Face checkpoint; when it holds
    ``model.safetensors.index.json``, ``fqn_to_index_mapping`` tells an exporter which shard
    file each Hugging Face key belongs to.
    """

    def __init__(self, *, model_config: Qwen3Model.Config, hf_assets_path: str | None):
        layer = model_config.layer
        if not isinstance(layer.attention, Qwen3Attention.Config):
            raise ValueError("a qwen3 block has Qwen3Attention")
        moe = layer.moe
        if moe is not None:
            _check_hf_routing(moe)
        self.model_config = model_config
        self.hf_assets_path = hf_assets_path
        self.fqn_to_index_mapping = read_shard_index(hf_assets_path)
        self.num_experts = 0 if moe is None else moe.num_experts
        self.balances_load = moe is not None and moe.load_balance_coeff is not None
        self.tied = model_config.enable_weight_tying

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The Hugging Face state dict of titan ``state_dict``; ``ValueError`` on unknown keys."""
        hf: dict[str, Any] = {}
        for key, value in state_dict.items():
            layer = TITAN_LAYER.fullmatch(key)
            if layer is None:
                if not (self.tied and key == "output.weight"):
                    hf[_lookup(key, table=TOP_LEVEL_KEYS, key=key)] = value
                continue
            index, name = layer.groups()
            if name == "moe.expert_bias":
                continue
            projection = EXPERT_KEYS.get(name)
            if projection is None:
                hf[f"model.layers.{index}.{_lookup(name, table=LAYER_KEYS, key=key)}"] = value
                continue
            for expert in range(value.shape[0]):
                hf[f"model.layers.{index}.mlp.experts.{expert}.{projection}.weight"] = value[expert]
        return hf

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        """titan's state dict of Hugging Face ``hf_state_dict``; ``ValueError`` on unknown keys."""
        state: dict[str, Any] = {}
        experts: dict[str, dict[int, Any]] = {}
        for key, value in hf_state_dict.items():
            layer = HF_LAYER.fullmatch(key)
            if layer is None:
                state[_lookup(key, table=_FROM_HF_TOP_LEVEL_KEYS, key=key)] = value
                continue
            index, name = layer.groups()
            if name in HF_IGNORED_LAYER_KEYS:
                continue
            expert = _HF_EXPERT.fullmatch(name)
            if expert is not None:
                number, projection = expert.groups()
                titan_key = (
                    f"layers.{index}.{_lookup(projection, table=_FROM_HF_EXPERT_KEYS, key=key)}"
                )
                experts.setdefault(titan_key, {})[int(number)] = value
                continue
            state[f"layers.{index}.{_lookup(name, table=_FROM_HF_LAYER_KEYS, key=key)}"] = value
            if name == "mlp.gate.weight" and self.balances_load:
                state[f"layers.{index}.moe.expert_bias"] = value.new_zeros(
                    value.shape[0], dtype=torch.float32
                )
        for titan_key, by_number in experts.items():
            if sorted(by_number) != list(range(self.num_experts)):
                raise ValueError(
                    f"{titan_key} needs experts 0..{self.num_experts - 1}, "
                    f"the checkpoint has {sorted(by_number)}"
                )
            state[titan_key] = torch.stack([by_number[e] for e in range(self.num_experts)])
        if self.tied and "output.weight" not in state and "tok_embeddings.weight" in state:
            state["output.weight"] = state["tok_embeddings.weight"]
        return state

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

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False) -> Any:
        """A DCP reader of the Hugging Face safetensors checkpoint in folder ``path``."""
        return hf_storage_reader(path, from_quantized=from_quantized, family="qwen3")


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
