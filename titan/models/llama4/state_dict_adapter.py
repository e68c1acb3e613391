"""Converts llama4 state dicts between titan's names and Hugging Face's ``Llama4ForCausalLM``.

The text-only model's keys (``model.layers.{i}...``, ``lm_head.weight``). Besides the names:

- Hugging Face fuses each MoE layer's experts: ``experts.gate_up_proj[E, dim, 2 * hidden]`` is
  titan's ``w1`` and ``w3`` (``[E, hidden, dim]`` each) transposed and concatenated, gate first;
  ``experts.down_proj[E, hidden, dim]`` is titan's ``w2`` transposed.
- titan's ``moe.expert_bias`` (the auxiliary-loss-free load-balancing bias, which only biases
  expert *selection*) has no place in Hugging Face's router: export drops it, as torchtitan's
  adapter does, and import sets it to zeros, which is what the Hugging Face model computes.
- Both sides rotate adjacent pairs of a head as complex numbers (Meta's layout), so q and k need
  no permutation, unlike llama3.

The dense layers' SwiGLU (``feed_forward.w1/w2/w3``), which torchtitan v0.2.2's adapter leaves
out, maps to Hugging Face's ``feed_forward.gate_proj/down_proj/up_proj``.

Import also reads the published multimodal checkpoints (``Llama4ForConditionalGeneration``,
e.g. Llama 4 Scout, the layout torchtitan's adapter expects): their text model sits under
``language_model.`` and their vision tower and projector are skipped. Export writes the
text-only model.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from titan.models.common.hf_adapter import TOP_LEVEL_KEYS, HFStateDictAdapter, Parts
from titan.models.llama4.model import uses_rope
from titan.models.llama4.model_config import Llama4Attention, Llama4Model

# titan name after ``layers.{i}.`` -> Hugging Face name after ``model.layers.{i}.``, for the
# tensors that only change name.
LAYER_KEYS = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "feed_forward.gate_proj.weight",
    "feed_forward.w3.weight": "feed_forward.up_proj.weight",
    "feed_forward.w2.weight": "feed_forward.down_proj.weight",
    "moe.router.gate.weight": "feed_forward.router.weight",
    "moe.shared_experts.w1.weight": "feed_forward.shared_expert.gate_proj.weight",
    "moe.shared_experts.w3.weight": "feed_forward.shared_expert.up_proj.weight",
    "moe.shared_experts.w2.weight": "feed_forward.shared_expert.down_proj.weight",
}
# Where a multimodal checkpoint keeps its text model, and the parts titan has no place for.
MULTIMODAL_TEXT_PREFIX = "language_model."
MULTIMODAL_IMAGE_PREFIXES = ("vision_model.", "multi_modal_projector.")
logger = logging.getLogger(__name__)


class Llama4StateDictAdapter(HFStateDictAdapter):
    """Maps a llama4 model's state dict to Hugging Face ``Llama4ForCausalLM`` names and back
    (the experts fused as Hugging Face stores them)."""

    family = "llama4"
    layer_keys = LAYER_KEYS
    titan_only_layer_keys = ("moe.expert_bias",)
    zero_expert_bias = True

    def check_model(self, model_config: Llama4Model.Config) -> None:
        """Llama4Attention, and an MoE that Hugging Face's Llama4 routes the same way."""
        layer = model_config.layer
        if not isinstance(layer.attention, Llama4Attention.Config):
            raise ValueError("a llama4 block has Llama4Attention")
        if layer.moe is not None:
            _check_hf_routing(layer.moe)

    def layer_to_hf(
        self, index: str, name: str, value: Any, hf: dict[str, Any], parts: Parts, *, key: str
    ) -> None:
        """The experts' gate and up wait in ``parts`` to be fused; down is transposed."""
        prefix = f"model.layers.{index}.feed_forward.experts"
        if name == "moe.experts.w1":
            parts["gates"][prefix] = value
        elif name == "moe.experts.w3":
            parts["ups"][prefix] = value
        elif name == "moe.experts.w2":
            hf[f"{prefix}.down_proj"] = value.transpose(-1, -2).contiguous()
        else:
            super().layer_to_hf(index, name, value, hf, parts, key=key)

    def finish_to_hf(self, hf: dict[str, Any], parts: Parts) -> None:
        """Each MoE layer's gate and up, transposed and concatenated (gate first)."""
        gates, ups = parts["gates"], parts["ups"]
        if set(gates) != set(ups):
            raise ValueError("every MoE layer needs both moe.experts.w1 and moe.experts.w3")
        for prefix, gate in gates.items():
            fused = torch.cat([gate.transpose(-1, -2), ups[prefix].transpose(-1, -2)], dim=-1)
            hf[f"{prefix}.gate_up_proj"] = fused

    def text_key(self, hf_key: str) -> str | None:
        """A multimodal checkpoint's text-model key without its prefix; its vision parts
        skipped."""
        if hf_key.startswith(MULTIMODAL_IMAGE_PREFIXES):
            return None
        return hf_key.removeprefix(MULTIMODAL_TEXT_PREFIX)

    def layer_from_hf(
        self, index: str, name: str, value: Any, state: dict[str, Any], parts: Parts, *, key: str
    ) -> None:
        """The fused experts split back into titan's ``w1``/``w3`` and ``w2``."""
        if name == "feed_forward.experts.gate_up_proj":
            gate, up = value.chunk(2, dim=-1)
            state[f"layers.{index}.moe.experts.w1"] = gate.transpose(-1, -2).contiguous()
            state[f"layers.{index}.moe.experts.w3"] = up.transpose(-1, -2).contiguous()
        elif name == "feed_forward.experts.down_proj":
            state[f"layers.{index}.moe.experts.w2"] = value.transpose(-1, -2).contiguous()
        else:
            super().layer_from_hf(index, name, value, state, parts, key=key)

    def finish_from_hf(self, state: dict[str, Any], hf_state_dict: dict[str, Any]) -> None:
        """Say how many vision tensors of a multimodal checkpoint were skipped."""
        image_tensors = sum(key.startswith(MULTIMODAL_IMAGE_PREFIXES) for key in hf_state_dict)
        if image_tensors:
            logger.info("skipped %d vision tensors of a multimodal checkpoint", image_tensors)

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """The Hugging Face ``Llama4TextConfig`` of this model, for an export's config.json.

        ``use_qk_norm`` and ``attn_temperature_tuning`` are off: torchtitan's llama4 (and so
        titan's) has neither the L2 norm of q/k nor the NoPE layers' temperature tuning.
        """
        config = self.model_config
        layer = config.layer
        attention = layer.attention
        assert isinstance(attention, Llama4Attention.Config)  # checked in __init__
        ffn, moe = layer.feed_forward, layer.moe
        n_layers = config.n_layers
        rope_layers = [uses_rope(attention, i) for i in range(n_layers)]
        chunked = attention.attn_type == "flex"
        return {
            "architectures": ["Llama4ForCausalLM"],
            "model_type": "llama4_text",
            "hidden_size": config.dim,
            "num_hidden_layers": n_layers,
            "num_attention_heads": attention.n_heads,
            "num_key_value_heads": attention.kv_heads(),
            "head_dim": attention.head_dim_for(config.dim),
            "vocab_size": config.vocab_size,
            "max_position_embeddings": config.max_seq_len,
            "rms_norm_eps": config.norm_eps,
            "rope_parameters": _rope_parameters(config),
            "intermediate_size": layer.moe_hidden_dim(config.dim) if moe else 0,
            "intermediate_size_mlp": ffn.effective_hidden_dim(config.dim) if ffn else 0,
            "num_local_experts": moe.num_experts if moe else 0,
            "num_experts_per_tok": moe.top_k if moe else 0,
            "interleave_moe_layer_step": layer.interleave_moe_layer_step,
            "moe_layers": [i for i in range(n_layers) if layer.uses_moe(i)],
            "no_rope_layers": [int(rope) for rope in rope_layers],
            "attention_chunk_size": attention.fixed_attn_block_size,
            "layer_types": [
                "chunked_attention" if chunked and rope else "full_attention"
                for rope in rope_layers
            ],
            "use_qk_norm": False,
            "attn_temperature_tuning": False,
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "torch_dtype": torch_dtype,
        }


def _check_hf_routing(moe: Any) -> None:
    """Refuse an MoE whose routing Hugging Face's ``Llama4TextMoe`` cannot compute."""
    differences = {
        "num_shared_experts": (moe.num_shared_experts, 1),
        "score_func": (moe.score_func, "sigmoid"),
        "route_norm": (moe.route_norm, False),
        "route_scale": (moe.route_scale, 1.0),
        "gate_bias": (moe.gate_bias, False),
        "score_before_experts": (moe.score_before_experts, True),
        "num_expert_groups": (moe.num_expert_groups, None),
    }
    wrong = [
        f"{name}={got!r} (needs {need!r})"
        for name, (got, need) in differences.items()
        if got != need
    ]
    if wrong:
        raise ValueError(
            "Hugging Face's Llama4 MoE cannot express this router: " + ", ".join(wrong)
        )


def _rope_parameters(config: Llama4Model.Config) -> dict[str, Any]:
    """Hugging Face's ``rope_parameters`` of titan's (optionally llama-scaled) rope."""
    rope = config.rope
    if rope.scaling == "none":
        return {"rope_type": "default", "rope_theta": rope.theta}
    return {
        "rope_type": "llama3",
        "rope_theta": rope.theta,
        "factor": rope.scaling_factor,
        "low_freq_factor": rope.low_freq_factor,
        "high_freq_factor": rope.high_freq_factor,
        "original_max_position_embeddings": rope.original_max_position_embeddings,
    }


__all__ = ["LAYER_KEYS", "Llama4StateDictAdapter", "TOP_LEVEL_KEYS"]
