"""Converts FLUX.1 autoencoder state dicts between Black Forest Labs' names (``ae.safetensors``,
what titan's :class:`~titan.models.flux.autoencoder.AutoEncoder` holds) and diffusers'
``AutoencoderKL`` layout.

Besides the names: diffusers numbers the decoder's levels from the coarsest (BFL from the
finest), and its mid-block attention projects with linears where BFL has 1x1 convolutions, so
those four weights gain or lose their two trailing unit dimensions.

Importing this module does not import torch: the conversions only call tensor methods.
"""

from __future__ import annotations

from typing import Any

from titan.models.common.hf_adapter import inverted
from titan.models.flux.model_config import AutoEncoder

FAMILY = "flux autoencoder"

# BFL module -> diffusers module, on both sides, for the modules whose name carries no level.
FIXED_MODULES = {
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
CONV_AS_LINEAR = frozenset(
    f"{side}.mid.attn_1.{p}.weight"
    for side in ("encoder", "decoder")
    for p in "q k v proj_out".split()
)
# Inside a resnet block, the one renamed module.
RESNET_PARTS = {"nin_shortcut": "conv_shortcut"}
# Per side: BFL's and diffusers' names of the level list and of a level's resampler.
LEVELS = {
    "encoder": ("down", "down_blocks", "downsample", "downsamplers.0"),
    "decoder": ("up", "up_blocks", "upsample", "upsamplers.0"),
}


def module_table(config: AutoEncoder.Config) -> dict[str, str]:
    """BFL module name -> diffusers module name, for every module holding tensors.

    The decoder has one resnet block more per level than the encoder, and diffusers numbers its
    levels from the coarsest where BFL numbers them from the finest.
    """
    levels = len(config.ch_mult)
    table = {}
    for side, (ours, theirs, resample, their_resample) in LEVELS.items():
        table |= {f"{side}.{b}": f"{side}.{d}" for b, d in FIXED_MODULES.items()}
        blocks = config.num_res_blocks + (side == "decoder")
        for index in range(levels):
            number = levels - 1 - index if side == "decoder" else index
            for j in range(blocks):
                table[f"{side}.{ours}.{index}.block.{j}"] = f"{side}.{theirs}.{number}.resnets.{j}"
            last = levels - 1 if side == "encoder" else 0
            if index != last:
                table[f"{side}.{ours}.{index}.{resample}.conv"] = (
                    f"{side}.{theirs}.{number}.{their_resample}.conv"
                )
    return table


def rename(key: str, *, modules: dict[str, str], parts: dict[str, str]) -> str:
    """``key`` (``module.param`` or ``resnet.part.param``) through the ``modules`` and resnet
    ``parts`` tables; ``ValueError`` naming it when it is no autoencoder key."""
    module, _, param = key.rpartition(".")
    if module in modules:
        return f"{modules[module]}.{param}"
    resnet, _, part = module.rpartition(".")
    if resnet in modules and param in ("weight", "bias"):
        return f"{modules[resnet]}.{parts.get(part, part)}.{param}"
    raise ValueError(f"{key!r} is not a {FAMILY} state-dict key")


class AutoEncoderStateDictAdapter:
    """Maps a FLUX.1 autoencoder's state dict to diffusers' ``AutoencoderKL`` names and back."""

    def __init__(self, *, config: AutoEncoder.Config):
        self.levels = len(config.ch_mult)
        self._modules = module_table(config)
        self._modules_of_hf = inverted(self._modules)

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """diffusers' state dict of BFL ``state_dict``; ``ValueError`` on unknown keys."""
        hf = {}
        for key, value in state_dict.items():
            if key in CONV_AS_LINEAR:
                value = value.reshape(value.shape[0], value.shape[1])
            hf[rename(key, modules=self._modules, parts=RESNET_PARTS)] = value
        return hf

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        """BFL's state dict of diffusers' ``hf_state_dict``; ``ValueError`` on unknown keys."""
        state = {}
        for hf_key, value in hf_state_dict.items():
            key = rename(hf_key, modules=self._modules_of_hf, parts=inverted(RESNET_PARTS))
            state[key] = value.reshape(*value.shape, 1, 1) if key in CONV_AS_LINEAR else value
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
