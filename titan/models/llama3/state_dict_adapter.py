"""Converts llama3 state dicts between titan's names and Hugging Face's ``LlamaForCausalLM``.

Two differences besides the names: Hugging Face's rotary embedding rotates the two *halves* of
a head (``rotate_half``), while titan, like Meta's reference, rotates *adjacent pairs* as complex
numbers. The q and k projections are therefore stored with their output rows permuted, the same
permutation Hugging Face's ``convert_llama_weights_to_hf.py`` applies.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from titan.models.common.attention import Attention
from titan.models.common.hf_adapter import (
    HF_LAYER,
    TITAN_LAYER,
    TOP_LEVEL_KEYS,
    hf_storage_reader,
    inverted,
    lookup,
    read_shard_index,
)
from titan.models.llama3.model_config import Llama3Model

logger = logging.getLogger(__name__)
# Unknown names are refused as not llama3 keys.
_lookup = functools.partial(lookup, family="llama3")

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
# Old Hugging Face checkpoints store the rotary table; titan recomputes it, so it is dropped.
HF_IGNORED_LAYER_KEYS = ("self_attn.rotary_emb.inv_freq",)


def to_hf_rotary_layout(weight: Any, n_heads: int) -> Any:
    """Reorder each head's output rows from adjacent pairs ``(x0, x1), ...`` to two halves."""
    rows, cols = weight.shape
    return weight.view(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def from_hf_rotary_layout(weight: Any, n_heads: int) -> Any:
    """The inverse of ``to_hf_rotary_layout``: two halves back to adjacent pairs."""
    rows, cols = weight.shape
    return weight.view(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


@dataclass(frozen=True, kw_only=True)
class _Renaming:
    """One direction of the conversion: how source keys are matched and renamed."""

    layer: re.Pattern[str]
    """Matches a block key of the source, capturing the layer index and the name inside it."""
    layer_prefix: str
    """What the target puts before ``.{index}.`` of a block key."""
    top_level: dict[str, str]
    """Source -> target names of the keys outside the blocks."""
    layers: dict[str, str]
    """Source -> target names inside a block."""
    dropped: tuple[str, ...]
    """Names inside a block that the target has no place for."""
    relayout: Callable[[Any, int], Any]
    """Moves q/k rows from the source's rotary layout to the target's."""


_TO_HF = _Renaming(
    layer=TITAN_LAYER,
    layer_prefix="model.layers",
    top_level=TOP_LEVEL_KEYS,
    layers=LAYER_KEYS,
    dropped=(),
    relayout=to_hf_rotary_layout,
)
_FROM_HF = _Renaming(
    layer=HF_LAYER,
    layer_prefix="layers",
    top_level=inverted(TOP_LEVEL_KEYS),
    layers=inverted(LAYER_KEYS),
    dropped=HF_IGNORED_LAYER_KEYS,
    relayout=from_hf_rotary_layout,
)


class Llama3StateDictAdapter:
    """Maps a llama3 model's state dict to Hugging Face Llama names and back.

    ``hf_assets_path`` is the folder of a Hugging Face checkpoint (tokenizer, weights); when it
    holds ``model.safetensors.index.json``, ``fqn_to_index_mapping`` tells an exporter which
    shard file each Hugging Face key belongs to, so a saved checkpoint keeps the same layout.
    """

    def __init__(self, *, model_config: Llama3Model.Config, hf_assets_path: str | None):
        layer = model_config.layer
        attention = layer.attention
        dense = layer.feed_forward is not None and layer.moe is None
        if not isinstance(attention, Attention.Config) or not dense:
            raise ValueError(
                "a llama3 block has grouped-query attention, a feed-forward and no MoE"
            )
        self.model_config = model_config
        self.hf_assets_path = hf_assets_path
        self.n_heads = attention.n_heads
        self.n_kv_heads = attention.kv_heads()
        # Head count of each projection whose rows follow the rotary layout, by either name.
        rotary = {"attention.wq.weight": self.n_heads, "attention.wk.weight": self.n_kv_heads}
        self._rotary_heads = {**rotary, **{LAYER_KEYS[k]: n for k, n in rotary.items()}}
        self.fqn_to_index_mapping = read_shard_index(hf_assets_path)

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The Hugging Face state dict of titan ``state_dict``; ``ValueError`` on unknown keys."""
        return self._rename(state_dict, _TO_HF)

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        """titan's state dict of Hugging Face ``hf_state_dict``; ``ValueError`` on unknown keys."""
        return self._rename(hf_state_dict, _FROM_HF)

    def _rename(self, state_dict: dict[str, Any], renaming: _Renaming) -> dict[str, Any]:
        """``state_dict`` under ``renaming``'s names, q/k rows moved to the target's layout."""
        renamed = {}
        for key, value in state_dict.items():
            layer = renaming.layer.fullmatch(key)
            if layer is None:
                renamed[_lookup(key, table=renaming.top_level, key=key)] = value
                continue
            index, name = layer.groups()
            if name in renaming.dropped:
                continue
            heads = self._rotary_heads.get(name)
            if heads is not None:
                value = renaming.relayout(value, heads)
            renamed[
                f"{renaming.layer_prefix}.{index}.{_lookup(name, table=renaming.layers, key=key)}"
            ] = value
        return renamed

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

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False) -> Any:
        """A DCP reader of the Hugging Face safetensors checkpoint in folder ``path``."""
        return hf_storage_reader(path, from_quantized=from_quantized, family="llama3")


__all__ = [
    "HF_IGNORED_LAYER_KEYS",
    "LAYER_KEYS",
    "Llama3StateDictAdapter",
    "TOP_LEVEL_KEYS",
    "from_hf_rotary_layout",
    "to_hf_rotary_layout",
]
