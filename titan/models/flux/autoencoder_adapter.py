"""Converts FLUX.1 autoencoder state dicts between Black Forest Labs' names (``ae.safetensors``,
what titan's :class:`~titan.models.flux.autoencoder.AutoEncoder` holds) and diffusers'
``AutoencoderKL`` layout.

Besides the names: diffusers numbers the decoder's levels from the coarsest (BFL from the
finest), and its mid-block attention projects with linears where BFL has 1x1 convolutions, so
those four weights gain or lose their two trailing unit dimensions.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

import re
from typing import Any

from titan.models.common.hf_adapter import inverted
from titan.models.flux.model_config import AutoEncoder

FAMILY = "flux autoencoder"

# BFL name -> diffusers name of the parts whose name carries no index.
FIXED_KEYS = {
    "norm_out": "conv_norm_out",
    "conv_in": "conv_in",
    "conv_out": "conv_out",
    "mid.block_1": "mid_block.resnets.0",
    "mid.block_2": "mid_block.resnets.1",
    "mid.attn_1.norm": "mid_block.attentions.0.group_norm",
    "mid.attn_1.q": "mid_block.attentions.0.to_q",
    "mid.attn_1.k": "mid_block.attentions.0.to_k",
    "mid.attn_1.v": "mid_block.attentions.0.to_v",
    "mid.attn_1.proj_out": "mid_block.attentions.0.to_out.0",
}
# Attention projections: 1x1 convolutions in BFL, linears in diffusers.
CONV_AS_LINEAR = ("mid.attn_1.q", "mid.attn_1.k", "mid.attn_1.v", "mid.attn_1.proj_out")
# Inside a resnet block, the one renamed module.
RESNET_KEYS = {"nin_shortcut": "conv_shortcut"}
# A level's resnet block and resampler: BFL's pattern -> diffusers' template, per side.
LEVELS = {
    "encoder": ("down", "down_blocks", "downsample", "downsamplers.0"),
    "decoder": ("up", "up_blocks", "upsample", "upsamplers.0"),
}
BFL_KEY = re.compile(r"(encoder|decoder)\.(.+)\.(weight|bias)")


class AutoEncoderStateDictAdapter:
    """Maps a FLUX.1 autoencoder's state dict to diffusers' ``AutoencoderKL`` names and back."""

    def __init__(self, *, config: AutoEncoder.Config):
        self.levels = len(config.ch_mult)

    def _level(self, side: str, index: int) -> int:
        """The other layout's number of level ``index`` of ``side`` (decoders count down)."""
        return self.levels - 1 - index if side == "decoder" else index

    def _rename(self, key: str, *, to_hf: bool) -> str:
        """``key`` in the other layout; ``ValueError`` naming it when it is no autoencoder key."""
        match = BFL_KEY.fullmatch(key)
        if match is None:
            raise ValueError(f"{key!r} is not a {FAMILY} state-dict key")
        side, name, param = match.groups()
        ours, theirs, ours_resample, theirs_resample = LEVELS[side]
        fixed = FIXED_KEYS if to_hf else inverted(FIXED_KEYS)
        resnet = RESNET_KEYS if to_hf else inverted(RESNET_KEYS)
        src, dst = (ours, theirs) if to_hf else (theirs, ours)
        src_resample, dst_resample = (
            (ours_resample, theirs_resample) if to_hf else (theirs_resample, ours_resample)
        )
        src_block, dst_block = ("block", "resnets") if to_hf else ("resnets", "block")
        level = re.fullmatch(rf"{src}\.(\d+)\.(.+)", name)
        if level is not None:
            index, rest = int(level.group(1)), level.group(2)
            prefix = f"{dst}.{self._level(side, index)}"
            block = re.fullmatch(rf"{src_block}\.(\d+)\.(\w+)", rest)
            if block is not None:
                part = block.group(2)
                return (
                    f"{side}.{prefix}.{dst_block}.{block.group(1)}.{resnet.get(part, part)}.{param}"
                )
            if rest == f"{src_resample}.conv":
                return f"{side}.{prefix}.{dst_resample}.conv.{param}"
        resnet_part = re.fullmatch(r"(.+)\.(\w+)", name)
        if name in fixed:
            return f"{side}.{fixed[name]}.{param}"
        if resnet_part is not None and resnet_part.group(1) in fixed:
            module, part = resnet_part.groups()
            return f"{side}.{fixed[module]}.{resnet.get(part, part)}.{param}"
        raise ValueError(f"{key!r} is not a {FAMILY} state-dict key")

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """diffusers' state dict of BFL ``state_dict``; ``ValueError`` on unknown keys."""
        hf = {}
        for key, value in state_dict.items():
            name = key.split(".", 1)[1].rsplit(".", 1)[0]
            if name in CONV_AS_LINEAR and key.endswith("weight"):
                value = value.reshape(value.shape[0], value.shape[1])
            hf[self._rename(key, to_hf=True)] = value
        return hf

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        """BFL's state dict of diffusers' ``hf_state_dict``; ``ValueError`` on unknown keys."""
        state = {}
        for hf_key, value in hf_state_dict.items():
            key = self._rename(hf_key, to_hf=False)
            name = key.split(".", 1)[1].rsplit(".", 1)[0]
            if name in CONV_AS_LINEAR and key.endswith("weight"):
                value = value.reshape(*value.shape, 1, 1)
            state[key] = value
        return state

    def config_json(self, config: AutoEncoder.Config) -> dict[str, Any]:
        """diffusers' ``AutoencoderKL`` config of autoencoder ``config``."""
        return {
            "_class_name": "AutoencoderKL",
            "in_channels": config.in_channels,
            "out_channels": config.out_ch,
            "down_block_types": ["DownEncoderBlock2D"] * self.levels,
            "up_block_types": ["UpDecoderBlock2D"] * self.levels,
            "block_out_channels": [config.ch * m for m in config.ch_mult],
            "layers_per_block": config.num_res_blocks,
            "latent_channels": config.z_channels,
            "norm_num_groups": 32,
            "sample_size": config.resolution,
            "scaling_factor": config.scale_factor,
            "shift_factor": config.shift_factor,
            "use_quant_conv": False,
            "use_post_quant_conv": False,
            "mid_block_add_attention": True,
        }


__all__ = ["AutoEncoderStateDictAdapter"]
