"""Converts deepseek_v3 state dicts between titan's names and Hugging Face's ``DeepseekV3``.

Besides the names, one difference of layout: titan keeps each MoE layer's routed experts as three
stacked tensors ``moe.experts.w1/w2/w3[E, ...]``, while Hugging Face checkpoints store one
``mlp.experts.{j}.{gate,up,down}_proj.weight`` per expert (transformers fuses them to
``gate_up_proj``/``down_proj`` in memory; ``from_hf`` reads that fused form too).

The rotary part of each head needs no permutation while ``DeepseekV3Config.rope_interleave`` is
true (DeepSeek's checkpoints, and ``config_json`` unless told otherwise): Hugging Face then rotates
adjacent pairs, as titan does; it writes the rotated pairs back as two halves, but queries and
keys alike, so the attention scores are the same. A checkpoint whose ``config.json`` (in
``hf_assets_path``) says ``rope_interleave: false`` rotates the two halves of the rope part
instead, and its rope rows of ``q_proj``/``q_b_proj`` and ``kv_a_proj_with_mqa`` are permuted
between the two layouts, both ways.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from titan.components import asset_files
from titan.models.common.hf_adapter import (
    HF_LAYER,
    TOP_LEVEL_KEYS,
    HFStateDictAdapter,
    Parts,
    hf_storage_reader,
)
from titan.models.deepseek_v3.model_config import DeepSeekV3Model, MLAttention

logger = logging.getLogger(__name__)

# titan name after ``layers.{i}.`` -> Hugging Face name after ``model.layers.{i}.``.
LAYER_KEYS = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wq_a.weight": "self_attn.q_a_proj.weight",
    "attention.q_norm.weight": "self_attn.q_a_layernorm.weight",
    "attention.wq_b.weight": "self_attn.q_b_proj.weight",
    "attention.wkv_a.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attention.kv_norm.weight": "self_attn.kv_a_layernorm.weight",
    "attention.wkv_b.weight": "self_attn.kv_b_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "moe.router.gate.weight": "mlp.gate.weight",
    "moe.expert_bias": "mlp.gate.e_score_correction_bias",
    "moe.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "moe.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
    "moe.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
}
# titan's stacked expert weight -> the projection name of one Hugging Face expert.
EXPERT_KEYS = {
    "moe.experts.w1": "gate_proj",
    "moe.experts.w3": "up_proj",
    "moe.experts.w2": "down_proj",
}
# transformers' in-memory form: gate and up projections of all experts in one tensor.
_HF_FUSED_GATE_UP = "mlp.experts.gate_up_proj"
_HF_FUSED_DOWN = "mlp.experts.down_proj"
# The projection only a multi-token prediction module has (it mixes two hidden states).
_HF_PREDICTION_MARKER = "eh_proj.weight"


class DeepSeekV3StateDictAdapter(HFStateDictAdapter):
    """Maps a deepseek_v3 model's state dict to Hugging Face ``DeepseekV3`` names and back."""

    family = "deepseek_v3"
    layer_keys = LAYER_KEYS
    expert_keys = EXPERT_KEYS

    def __init__(self, *, model_config: DeepSeekV3Model.Config, hf_assets_path: str | None):
        super().__init__(model_config=model_config, hf_assets_path=hf_assets_path)
        self.has_expert_bias = self.balances_load
        self.rope_interleave = _read_rope_interleave(hf_assets_path)
        # Rows of each projection whose rope part moves when rope_interleave is off: the head
        # count and head width of its output.
        attention = model_config.layer.attention
        query = (attention.n_heads, attention.qk_nope_head_dim + attention.qk_rope_head_dim)
        latent = (1, attention.kv_lora_rank + attention.qk_rope_head_dim)
        self._rope_rows = {"attention.wq.weight": query, "attention.wq_b.weight": query}
        self._rope_rows["attention.wkv_a.weight"] = latent
        self._rope_dim = attention.qk_rope_head_dim

    def check_model(self, model_config: DeepSeekV3Model.Config) -> None:
        """Multi-head latent attention in every block."""
        if not isinstance(model_config.layer.attention, MLAttention.Config):
            raise ValueError("a deepseek_v3 block has multi-head latent attention (MLAttention)")

    def layer_to_hf(
        self, index: str, name: str, value: Any, hf: dict[str, Any], parts: Parts, *, key: str
    ) -> None:
        """A model without an expert bias (``load_balance_coeff`` None) still exports Hugging
        Face's ``e_score_correction_bias``, as zeros, which routes the same."""
        super().layer_to_hf(index, name, value, hf, parts, key=key)
        if name == "moe.router.gate.weight" and not self.has_expert_bias:
            bias = value.new_zeros(value.shape[0]).float()
            hf[f"model.layers.{index}.mlp.gate.e_score_correction_bias"] = bias

    def skipped_hf_layers(self, hf_state_dict: dict[str, Any]) -> frozenset[str]:
        """DeepSeek's releases append multi-token-prediction modules as extra layers (V3's layer
        61, marked by an ``eh_proj``); titan trains no such module, so their keys are skipped."""
        found = frozenset(_multi_token_prediction_layers(hf_state_dict))
        if found:
            logger.info("skipping the multi-token prediction layers %s", sorted(found))
        return found

    def layer_from_hf(
        self, index: str, name: str, value: Any, state: dict[str, Any], parts: Parts, *, key: str
    ) -> None:
        """transformers' fused in-memory experts split back; a zero expert bias the model has
        no place for dropped, a non-zero one refused."""
        prefix = f"layers.{index}"
        if name == _HF_FUSED_GATE_UP:
            hidden = value.shape[1] // 2
            state[f"{prefix}.moe.experts.w1"] = value[:, :hidden]
            state[f"{prefix}.moe.experts.w3"] = value[:, hidden:]
        elif name == _HF_FUSED_DOWN:
            state[f"{prefix}.moe.experts.w2"] = value
        elif name == LAYER_KEYS["moe.expert_bias"] and not self.has_expert_bias:
            if bool(value.any()):
                raise ValueError(
                    f"{key!r} is non-zero but this model has no expert bias; "
                    "set moe.load_balance_coeff to load it"
                )
        else:
            super().layer_from_hf(index, name, value, state, parts, key=key)

    def relayout(self, name: str, value: Any, *, to_hf: bool) -> Any:
        """``value`` of projection ``name`` with its rope rows in the target's layout.

        titan keeps each head's rope rows as adjacent pairs; a ``rope_interleave: false``
        checkpoint keeps the even ones first, then the odd ones. Other weights pass unchanged.
        """
        shape = self._rope_rows.get(name)
        if shape is None or self.rope_interleave:
            return value
        heads, head_dim = shape
        rope, cols = self._rope_dim, value.shape[-1]
        by_head = value.reshape(heads, head_dim, cols)
        rows = by_head[:, head_dim - rope :]
        if to_hf:
            moved = rows.reshape(heads, rope // 2, 2, cols).transpose(1, 2)
        else:
            moved = rows.reshape(heads, 2, rope // 2, cols).transpose(1, 2)
        out = by_head.clone()
        out[:, head_dim - rope :] = moved.reshape(heads, rope, cols)
        return out.reshape(value.shape)

    def hf_differences(self) -> list[str]:
        """Why Hugging Face's ``DeepseekV3`` would compute something else than this model."""
        config = self.model_config
        moe = config.layer.moe
        found = []
        if moe is not None and config.layer.n_dense_layers < config.n_layers:
            if moe.score_func != "sigmoid":
                found.append(f"score_func {moe.score_func!r} (Hugging Face routes by sigmoid)")
            if moe.score_before_experts:
                found.append("score_before_experts (Hugging Face weighs the experts' outputs)")
            if moe.gate_bias:
                found.append("gate_bias (Hugging Face's router has none)")
            if moe.force_load_balance:
                found.append("force_load_balance (Hugging Face routes by score)")
            if moe.num_shared_experts == 0:
                found.append("no shared experts (Hugging Face always has them)")
        return found

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """The Hugging Face ``DeepseekV3Config`` of this model, for an export folder's config.json.

        A model Hugging Face's ``DeepseekV3`` cannot reproduce (softmax routing, as the debug,
        16B and 236B flavors) still gets its closest config, with a logged note naming why.
        """
        differences = self.hf_differences()
        if differences:
            # Info, not a warning: the trainer asks for this config at every start, export or not.
            logger.info(
                "Hugging Face's DeepseekV3 will not compute what this model computes: %s",
                "; ".join(differences),
            )
        config = self.model_config
        layer = config.layer
        attention = layer.attention
        assert isinstance(attention, MLAttention.Config)  # checked in __init__
        ffn, moe = layer.feed_forward, layer.moe
        all_dense = moe is None or layer.n_dense_layers >= config.n_layers
        hidden = ffn.effective_hidden_dim(config.dim) if ffn is not None else None
        groups = moe.num_expert_groups if moe is not None else None
        return {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "vocab_size": config.vocab_size,
            "hidden_size": config.dim,
            "intermediate_size": hidden,
            "moe_intermediate_size": layer.moe_hidden_dim(config.dim) if moe else hidden,
            "num_hidden_layers": config.n_layers,
            "first_k_dense_replace": config.n_layers if all_dense else layer.n_dense_layers,
            "num_attention_heads": attention.n_heads,
            "num_key_value_heads": attention.n_heads,
            "q_lora_rank": attention.q_lora_rank or None,
            "kv_lora_rank": attention.kv_lora_rank,
            "qk_nope_head_dim": attention.qk_nope_head_dim,
            "qk_rope_head_dim": attention.qk_rope_head_dim,
            "v_head_dim": attention.v_head_dim,
            "n_routed_experts": moe.num_experts if moe is not None else 1,
            "n_shared_experts": moe.num_shared_experts if moe is not None else 1,
            "num_experts_per_tok": moe.top_k if moe is not None else 1,
            "n_group": groups or 1,
            "topk_group": (moe.num_limited_groups if groups else 1) if moe is not None else 1,
            "norm_topk_prob": moe.route_norm if moe is not None else False,
            "routed_scaling_factor": moe.route_scale if moe is not None else 1.0,
            "max_position_embeddings": config.max_seq_len,
            "rms_norm_eps": config.norm_eps,
            "rope_parameters": self._rope_parameters(),
            "rope_interleave": self.rope_interleave,
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "num_nextn_predict_layers": 0,
            "torch_dtype": torch_dtype,
        }

    def _rope_parameters(self) -> dict[str, Any]:
        """Hugging Face's ``rope_parameters``: YaRN exactly when titan's table turns it on.

        titan's ``mscale`` scales the softmax (Hugging Face's ``mscale_all_dim``); setting
        ``mscale`` to the same value keeps Hugging Face's cos/sin factor at exactly 1.
        """
        config = self.model_config
        rope = config.rope
        if config.max_seq_len <= rope.original_seq_len:
            return {"rope_type": "default", "rope_theta": rope.theta}
        return {
            "rope_type": "yarn",
            "rope_theta": rope.theta,
            "factor": rope.rope_factor,
            "original_max_position_embeddings": rope.original_seq_len,
            "beta_fast": rope.beta_fast,
            "beta_slow": rope.beta_slow,
            "mscale": rope.mscale,
            "mscale_all_dim": rope.mscale,
        }

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False) -> Any:
        """A DCP reader of the Hugging Face safetensors checkpoint in folder ``path``.

        ``from_quantized`` reads DeepSeek's float8 release (128x128 blocks of scales), dequantized
        to float32, as torchtitan does for the 671B model.
        """
        if from_quantized:
            import torch
            from torch.distributed.checkpoint.quantized_hf_storage import (
                QuantizedHuggingFaceStorageReader,
            )

            return QuantizedHuggingFaceStorageReader(
                path=path, target_dtype=torch.float32, block_size=128, thread_count=4
            )
        return hf_storage_reader(path, from_quantized=False, family="deepseek_v3")


def _read_rope_interleave(hf_assets_path: str | None) -> bool:
    """``rope_interleave`` of the ``config.json`` in ``hf_assets_path``; True without one."""
    if not hf_assets_path:
        return True
    path = os.path.join(hf_assets_path, "config.json")
    config = asset_files.read_json(path, what="the Hugging Face model config")
    if config is None:
        return True
    if not isinstance(config, dict):
        raise asset_files.AssetFileError(
            f"{path} holds {type(config).__name__} JSON, not an object"
        )
    return bool(config.get("rope_interleave", True))


def _multi_token_prediction_layers(hf_state_dict: dict[str, Any]) -> set[str]:
    """The layer indices of ``hf_state_dict`` that are multi-token prediction modules."""
    found = set()
    for key in hf_state_dict:
        layer = HF_LAYER.fullmatch(key)
        if layer is not None and layer.group(2) == _HF_PREDICTION_MARKER:
            found.add(layer.group(1))
    return found


__all__ = ["EXPERT_KEYS", "LAYER_KEYS", "TOP_LEVEL_KEYS", "DeepSeekV3StateDictAdapter"]
