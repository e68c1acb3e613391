"""Converts flux transformer state dicts between titan's names (FLUX.1's, as torchtitan v0.2.2
has them) and diffusers' ``FluxTransformer2DModel`` safetensors layout.

Besides the names, three things differ:

- titan fuses each double-stream attention's q, k and v into one ``qkv`` projection, and each
  single-stream block's q, k, v and MLP input into ``linear1``; diffusers keeps them apart, so
  an export splits them and an import joins them, in the order of :data:`FUSED_KEYS`;
- the final adaLN projection gives (shift, scale) in titan and (scale, shift) in diffusers, so
  its two halves swap both ways;
- diffusers looks for a transformer's index file under its own name
  (``diffusion_pytorch_model.safetensors.index.json``) and, in a whole pipeline folder, under
  ``transformer/``.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Any

from titan.components import asset_files
from titan.models.common.hf_adapter import (
    HFStateDictAdapter,
    inverted,
    read_shard_index,
)
from titan.models.flux.model_config import FluxModel

FAMILY = "flux"

# titan name -> diffusers name, outside the blocks.
TOP_LEVEL_KEYS = {
    f"{titan}.{param}": f"{hf}.{param}"
    for titan, hf in {
        "img_in": "x_embedder",
        "txt_in": "context_embedder",
        "time_in.in_layer": "time_text_embed.timestep_embedder.linear_1",
        "time_in.out_layer": "time_text_embed.timestep_embedder.linear_2",
        "vector_in.in_layer": "time_text_embed.text_embedder.linear_1",
        "vector_in.out_layer": "time_text_embed.text_embedder.linear_2",
        "guidance_in.in_layer": "time_text_embed.guidance_embedder.linear_1",
        "guidance_in.out_layer": "time_text_embed.guidance_embedder.linear_2",
        "final_layer.adaLN_modulation.1": "norm_out.linear",
        "final_layer.linear": "proj_out",
    }.items()
    for param in ("weight", "bias")
}
# Tensors whose two halves are in the other order in diffusers (shift/scale vs scale/shift).
SWAPPED_HALVES = frozenset(
    {"final_layer.adaLN_modulation.1.weight", "final_layer.adaLN_modulation.1.bias"}
)

# Block lists: titan's name -> diffusers'.
BLOCK_LISTS = {"double_blocks": "transformer_blocks", "single_blocks": "single_transformer_blocks"}
TITAN_BLOCK = re.compile(r"(double_blocks|single_blocks)\.(\d+)\.(.+)")
HF_BLOCK = re.compile(r"(transformer_blocks|single_transformer_blocks)\.(\d+)\.(.+)")


def _both(table: dict[str, str]) -> dict[str, str]:
    """``table`` of module names -> the same for their ``weight`` and ``bias``."""
    return {f"{t}.{p}": f"{h}.{p}" for t, h in table.items() for p in ("weight", "bias")}


# Renamed tensors inside a block, titan -> diffusers, by block list.
BLOCK_KEYS = {
    "double_blocks": {
        **_both(
            {
                "img_mod.lin": "norm1.linear",
                "txt_mod.lin": "norm1_context.linear",
                "img_attn.proj": "attn.to_out.0",
                "txt_attn.proj": "attn.to_add_out",
                "img_mlp.0": "ff.net.0.proj",
                "img_mlp.2": "ff.net.2",
                "txt_mlp.0": "ff_context.net.0.proj",
                "txt_mlp.2": "ff_context.net.2",
            }
        ),
        "img_attn.norm.query_norm.weight": "attn.norm_q.weight",
        "img_attn.norm.key_norm.weight": "attn.norm_k.weight",
        "txt_attn.norm.query_norm.weight": "attn.norm_added_q.weight",
        "txt_attn.norm.key_norm.weight": "attn.norm_added_k.weight",
    },
    "single_blocks": {
        **_both({"modulation.lin": "norm.linear", "linear2": "proj_out"}),
        "norm.query_norm.weight": "attn.norm_q.weight",
        "norm.key_norm.weight": "attn.norm_k.weight",
    },
}


def _fused(parts: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """``parts`` of fused modules -> the same for their ``weight`` and ``bias``."""
    return {
        f"{fused}.{p}": tuple(f"{part}.{p}" for part in names)
        for fused, names in parts.items()
        for p in ("weight", "bias")
    }


# Fused titan tensors inside a block -> the diffusers tensors they hold, in row order.
FUSED_KEYS = {
    "double_blocks": _fused(
        {
            "img_attn.qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
            "txt_attn.qkv": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
        }
    ),
    "single_blocks": _fused({"linear1": ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp")}),
}
# The inverse tables, for imports.
BLOCK_LISTS_OF_HF = inverted(BLOCK_LISTS)
BLOCK_KEYS_OF_HF = {blocks: inverted(table) for blocks, table in BLOCK_KEYS.items()}
# diffusers tensor inside a block -> (fused titan tensor, its position in the fused rows).
FUSED_PART_OF = {
    blocks: {part: (fused, i) for fused, parts in table.items() for i, part in enumerate(parts)}
    for blocks, table in FUSED_KEYS.items()
}
# The weights and index files of a diffusers transformer folder, which exports write too.
DIFFUSERS_WEIGHTS = "diffusion_pytorch_model.safetensors"
DIFFUSERS_INDEX = f"{DIFFUSERS_WEIGHTS}.index.json"
# diffusers' fixed architecture choices a flux config must share to be exported.
DIFFUSERS_MLP_RATIO = 4.0
DIFFUSERS_THETA = 10000


def swap_halves(value: Any) -> Any:
    """``value`` with the two halves of its first dimension swapped."""
    half = value.shape[0] // 2
    out = value.new_empty(value.shape)
    out[:half].copy_(value[half:])
    out[half:].copy_(value[:half])
    return out


def transformer_folder(hf_assets_path: str | None) -> str | None:
    """The folder holding the transformer's weights: ``transformer/`` of a whole diffusers
    pipeline (which has ``model_index.json``), else ``hf_assets_path`` itself."""
    if not hf_assets_path:
        return hf_assets_path
    index = os.path.join(hf_assets_path, "model_index.json")
    found = asset_files.kind(index)
    if found == asset_files.FILE:
        return os.path.join(hf_assets_path, "transformer")
    if found != asset_files.MISSING:
        raise asset_files.AssetFileError(
            f"{index} (a diffusers pipeline's index) is {found}, not a file"
        )
    return hf_assets_path


class FluxStateDictAdapter(HFStateDictAdapter):
    """Maps a flux transformer's state dict to diffusers' ``FluxTransformer2DModel`` names and
    back (fused projections split and joined, the final modulation's halves swapped)."""

    family = FAMILY
    top_level_keys = TOP_LEVEL_KEYS
    weights_file = DIFFUSERS_WEIGHTS

    def __init__(self, *, model_config: FluxModel.Config, hf_assets_path: str | None):
        folder = transformer_folder(hf_assets_path)
        super().__init__(model_config=model_config, hf_assets_path=folder)
        if self.fqn_to_index_mapping is None:
            self.fqn_to_index_mapping = read_shard_index(folder, index_file=DIFFUSERS_INDEX)
        hidden = model_config.hidden_size
        mlp_hidden = int(hidden * model_config.mlp_ratio)
        # Rows of each part of a fused tensor, by block list.
        self._split_sizes = {
            "double_blocks": (hidden,) * 3,
            "single_blocks": (hidden,) * 3 + (mlp_hidden,),
        }

    def check_model(self, model_config: FluxModel.Config) -> None:
        """The flux shapes diffusers' ``FluxTransformer2DModel`` can hold."""
        problems = [
            f"{name} {value!r} (diffusers has {wanted!r})"
            for name, value, wanted in (
                ("mlp_ratio", model_config.mlp_ratio, DIFFUSERS_MLP_RATIO),
                ("qkv_bias", model_config.qkv_bias, True),
                ("rope.theta", model_config.rope.theta, DIFFUSERS_THETA),
            )
            if value != wanted
        ]
        if problems:
            raise ValueError(
                "diffusers' FluxTransformer2DModel cannot hold a flux model with "
                + ", ".join(problems)
            )

    # --------------------------------------------------------------------------- export

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """diffusers' state dict of titan ``state_dict``; ``ValueError`` on unknown keys."""
        hf: dict[str, Any] = {}
        for key, value in state_dict.items():
            block = TITAN_BLOCK.fullmatch(key)
            if block is None:
                hf_key = self.lookup(key, TOP_LEVEL_KEYS, key=key)
                hf[hf_key] = swap_halves(value) if key in SWAPPED_HALVES else value
                continue
            blocks, index, name = block.groups()
            prefix = f"{BLOCK_LISTS[blocks]}.{index}"
            parts = FUSED_KEYS[blocks].get(name)
            if parts is None:
                hf[f"{prefix}.{self.lookup(name, BLOCK_KEYS[blocks], key=key)}"] = value
                continue
            pieces = value.split(list(self._split_sizes[blocks]), dim=0)
            for part, piece in zip(parts, pieces, strict=True):
                hf[f"{prefix}.{part}"] = piece
        return hf

    # --------------------------------------------------------------------------- import

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        """titan's state dict of diffusers' ``hf_state_dict``; ``ValueError`` on unknown keys
        and on a fused tensor whose parts are not all there."""
        state: dict[str, Any] = {}
        fused: defaultdict[str, dict[int, Any]] = defaultdict(dict)
        for hf_key, value in hf_state_dict.items():
            block = HF_BLOCK.fullmatch(hf_key)
            if block is None:
                key = self.lookup(hf_key, self._top_level_of_hf, key=hf_key)
                state[key] = swap_halves(value) if key in SWAPPED_HALVES else value
                continue
            hf_blocks, index, name = block.groups()
            blocks = BLOCK_LISTS_OF_HF[hf_blocks]
            prefix = f"{blocks}.{index}"
            part_of = FUSED_PART_OF[blocks].get(name)
            if part_of is not None:
                fused_name, position = part_of
                fused[f"{prefix}.{fused_name}"][position] = value
                continue
            state[f"{prefix}.{self.lookup(name, BLOCK_KEYS_OF_HF[blocks], key=hf_key)}"] = value
        for key, pieces in fused.items():
            blocks, _, name = TITAN_BLOCK.fullmatch(key).groups()
            wanted = len(FUSED_KEYS[blocks][name])
            if sorted(pieces) != list(range(wanted)):
                names = FUSED_KEYS[blocks][name]
                absent = [names[i] for i in range(wanted) if i not in pieces]
                raise ValueError(f"{key} needs {', '.join(absent)} too, the checkpoint lacks it")
            first = pieces[0]
            rows = sum(pieces[i].shape[0] for i in range(wanted))
            out = first.new_empty((rows, *first.shape[1:]))
            start = 0
            for i in range(wanted):
                out[start : start + pieces[i].shape[0]].copy_(pieces[i])
                start += pieces[i].shape[0]
            state[key] = out
        return state

    # --------------------------------------------------------------------------- config

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """diffusers' ``FluxTransformer2DModel`` config of this model (its ``config.json``)."""
        config = self.model_config
        return {
            "_class_name": "FluxTransformer2DModel",
            "patch_size": 1,
            "in_channels": config.in_channels,
            "out_channels": config.out_channels,
            "num_layers": config.depth,
            "num_single_layers": config.depth_single_blocks,
            "attention_head_dim": config.hidden_size // config.num_heads,
            "num_attention_heads": config.num_heads,
            "joint_attention_dim": config.context_in_dim,
            "pooled_projection_dim": config.vec_in_dim,
            "guidance_embeds": config.guidance_embed,
            "axes_dims_rope": list(config.rope.axes_dim),
            "torch_dtype": torch_dtype,
        }


__all__ = [
    "BLOCK_KEYS",
    "FUSED_KEYS",
    "FluxStateDictAdapter",
    "TOP_LEVEL_KEYS",
    "swap_halves",
    "transformer_folder",
]
