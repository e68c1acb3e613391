"""Converts gpt_oss state dicts between titan's names and Hugging Face's ``GptOssForCausalLM``.

Besides the names, two differences:

- Hugging Face stores each stacked expert projection input-major, ``gate_up_proj[E, dim,
  2*hidden]`` and ``down_proj[E, hidden, dim]`` (it computes ``x @ W``), while titan, like
  torchtitan, stores ``mlp1_weight[E, 2*hidden, dim]`` and ``mlp2_weight[E, dim, hidden]``
  (``x @ W.T``); the conversion transposes the last two dimensions. Gate and up stay
  interleaved in both (gate in the even rows of ``mlp1``, even columns of ``gate_up_proj``).
- Hugging Face's gpt-oss has no auxiliary-loss-free expert bias. An export drops titan's
  ``moe.expert_bias`` (it only steers routing during training); an import starts it at zero,
  the value torchtitan initializes it to.

Both rotate the two halves of a head, so q/k rows need no permutation (unlike llama3).
torchtitan v0.2.2's adapter names the MXFP4-quantized ``*_blocks`` tensors of OpenAI's release;
this one reads and writes the unquantized checkpoints ``save_pretrained`` writes.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

import logging
from typing import Any

from titan.models.common.hf_adapter import TOP_LEVEL_KEYS, HFStateDictAdapter, hf_storage_reader
from titan.models.gpt_oss.model_config import GptOssAttention, GptOssModel, GptOssMoE

logger = logging.getLogger(__name__)

# titan name after ``layers.{i}.`` -> Hugging Face name after ``model.layers.{i}.``.
LAYER_KEYS = {
    **{
        f"attention.w{p}.{kind}": f"self_attn.{p}_proj.{kind}"
        for p in "qkvo"
        for kind in ("weight", "bias")
    },
    "attention.sinks": "self_attn.sinks",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "moe.router.gate.weight": "mlp.router.weight",
    "moe.router.gate.bias": "mlp.router.bias",
    "moe.experts.mlp1_weight": "mlp.experts.gate_up_proj",
    "moe.experts.mlp1_bias": "mlp.experts.gate_up_proj_bias",
    "moe.experts.mlp2_weight": "mlp.experts.down_proj",
    "moe.experts.mlp2_bias": "mlp.experts.down_proj_bias",
}
# Stacked expert weights whose last two dimensions are transposed between the two layouts.
TRANSPOSED = frozenset({"moe.experts.mlp1_weight", "moe.experts.mlp2_weight"})
# titan's load-balancing state, which Hugging Face's gpt-oss has no place for.
EXPERT_BIAS = "moe.expert_bias"
TITAN_ONLY_LAYER_KEYS = (EXPERT_BIAS, "moe.tokens_per_expert")


class GptOssStateDictAdapter(HFStateDictAdapter):
    """Maps a gpt_oss model's state dict to Hugging Face gpt-oss names and back.

    An export leaves ``moe.expert_bias`` out (Hugging Face's gpt-oss routes without it); an
    import starts each layer's at zero when the config balances load.
    """

    family = "gpt_oss"
    layer_keys = LAYER_KEYS
    titan_only_layer_keys = TITAN_ONLY_LAYER_KEYS
    zero_expert_bias = True

    def check_model(self, model_config: GptOssModel.Config) -> None:
        """GptOssAttention and a GptOssMoE in every block."""
        layer = model_config.layer
        if not isinstance(layer.attention, GptOssAttention.Config) or not isinstance(
            layer.moe, GptOssMoE.Config
        ):
            raise ValueError("a gpt_oss block has GptOssAttention and a GptOssMoE")

    def relayout(self, name: str, value: Any, *, to_hf: bool) -> Any:
        """The stacked expert weights with their last two dimensions swapped, both ways."""
        return value.transpose(1, 2) if name in TRANSPOSED else value

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """The Hugging Face ``GptOssConfig`` of this model, for an export folder's config.json.

        Hugging Face's router computes gpt-oss's routing only (softmax over all experts, top-k
        renormalised, no shared experts, biased gate, scores applied after the experts); for
        another routing this logs a warning, since an export would load into Hugging Face but
        route differently there. (The trainer asks for this at every start, so it cannot raise.)
        """
        config = self.model_config
        layer = config.layer
        attention, moe, rope = layer.attention, layer.moe, config.rope
        assert isinstance(attention, GptOssAttention.Config)  # checked in __init__
        assert isinstance(moe, GptOssMoE.Config)
        mismatch = hf_routing_mismatch(moe)
        if mismatch is not None:
            logger.warning("a Hugging Face export of this model would misroute: %s", mismatch)
        # The context the model serves: YaRN's extended one (131072 for gpt-oss, as OpenAI's
        # config.json says), not the training sequence length titan's max_seq_len holds.
        max_positions = config.max_seq_len
        if rope.rope_factor > 1.0:
            max_positions = int(rope.original_seq_len * rope.rope_factor)
            rope_parameters = {
                "rope_type": "yarn",
                "rope_theta": rope.theta,
                "factor": rope.rope_factor,
                "beta_fast": rope.ntk_beta,
                "beta_slow": rope.ntk_alpha,
                "truncate": False,
                "original_max_position_embeddings": rope.original_seq_len,
            }
        else:
            rope_parameters = {"rope_type": "default", "rope_theta": rope.theta}
        return {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "hidden_size": config.dim,
            "intermediate_size": layer.moe_hidden_dim(config.dim),
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": attention.n_heads,
            "num_key_value_heads": attention.kv_heads(),
            "head_dim": attention.head_dim,
            "num_local_experts": moe.num_experts,
            "num_experts_per_tok": moe.top_k,
            "vocab_size": config.vocab_size,
            "max_position_embeddings": max_positions,
            "rms_norm_eps": config.norm_eps,
            "rope_parameters": rope_parameters,
            "sliding_window": attention.sliding_window_size,
            "layer_types": [
                "sliding_attention" if layer.uses_sliding_window(i) else "full_attention"
                for i in range(config.n_layers)
            ],
            "swiglu_limit": moe.swiglu_limit,
            "attention_bias": True,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "torch_dtype": torch_dtype,
        }

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False) -> Any:
        """A DCP reader of the unquantized Hugging Face safetensors checkpoint in ``path``."""
        if from_quantized:
            raise ValueError(
                "titan cannot load gpt-oss's MXFP4-quantized experts; load an unquantized "
                "(bf16/fp32) checkpoint"
            )
        return hf_storage_reader(path, from_quantized=False, family="gpt_oss")


def hf_routing_mismatch(moe: GptOssMoE.Config) -> str | None:
    """The first routing setting Hugging Face's gpt-oss cannot express, or ``None``."""
    expected = {
        "score_func": "softmax",
        "route_norm": True,
        "route_scale": 1.0,
        "gate_bias": True,
        "num_shared_experts": 0,
        "score_before_experts": False,
    }
    for name, value in expected.items():
        if getattr(moe, name) != value:
            return (
                f"Hugging Face's gpt-oss routes with {name}={value!r}; this model has "
                f"{name}={getattr(moe, name)!r}, which no GptOssConfig describes"
            )
    return None


__all__ = ["LAYER_KEYS", "TOP_LEVEL_KEYS", "GptOssStateDictAdapter"]
