"""FLUX.1's image autoencoder: a convolutional encoder to a diagonal Gaussian over latents, and the
decoder back to pixels, in Black Forest Labs' layout (the names ``ae.safetensors`` uses).

``encode`` returns shifted and scaled latents (unit variance, what the transformer denoises),
``decode`` undoes the scaling first. Training never updates it: :func:`load_autoencoder` returns
it frozen, in eval mode.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from titan.models.flux import model_config

# Every GroupNorm of the autoencoder: 32 groups, as FLUX.1 was trained.
NORM_GROUPS = 32
NORM_EPS = 1e-6
CONFIG_KEY = "encoder.autoencoder_path"


class AutoEncoderLoadError(ValueError):
    """The autoencoder checkpoint is missing, unreadable or of another shape."""


def group_norm(channels: int) -> nn.GroupNorm:
    """The autoencoder's normalisation over ``channels``."""
    return nn.GroupNorm(num_groups=NORM_GROUPS, num_channels=channels, eps=NORM_EPS, affine=True)


def conv3x3(channels_in: int, channels_out: int) -> nn.Conv2d:
    """A same-size 3x3 convolution."""
    return nn.Conv2d(channels_in, channels_out, kernel_size=3, stride=1, padding=1)


class AttnBlock(nn.Module):
    """Single-head self-attention over all pixels, with 1x1-convolution projections."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = group_norm(channels)
        self.q = nn.Conv2d(channels, channels, kernel_size=1)
        self.k = nn.Conv2d(channels, channels, kernel_size=1)
        self.v = nn.Conv2d(channels, channels, kernel_size=1)
        self.proj_out = nn.Conv2d(channels, channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x + proj_out(attention(norm(x)))`` over ``[b, c, h, w]``."""
        normed = self.norm(x)
        b, c, h, w = x.shape

        def pixels(conv: nn.Conv2d) -> torch.Tensor:
            return conv(normed).view(b, 1, c, h * w).transpose(2, 3)

        out = F.scaled_dot_product_attention(pixels(self.q), pixels(self.k), pixels(self.v))
        return x + self.proj_out(out.transpose(2, 3).reshape(b, c, h, w))


class ResnetBlock(nn.Module):
    """``x + conv2(swish(norm2(conv1(swish(norm1(x))))))``, with a 1x1 shortcut where the
    channel count changes."""

    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.norm1 = group_norm(channels_in)
        self.conv1 = conv3x3(channels_in, channels_out)
        self.norm2 = group_norm(channels_out)
        self.conv2 = conv3x3(channels_out, channels_out)
        self.nin_shortcut = (
            nn.Conv2d(channels_in, channels_out, kernel_size=1)
            if channels_in != channels_out
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block over ``x`` ``[b, c_in, h, w]``."""
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class Downsample(nn.Module):
    """Halve height and width with a stride-2 3x3 convolution, padded on the right and bottom
    only (torch's convolutions pad symmetrically, so the padding is explicit)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` at half the resolution."""
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    """Double height and width (nearest neighbour), then a 3x3 convolution."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = conv3x3(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` at twice the resolution."""
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def level(blocks: list[ResnetBlock], resample: nn.Module | None, name: str) -> nn.Module:
    """One resolution level: its resnet ``block`` list (and an empty ``attn`` list, which FLUX.1
    keeps for its layout) and, except at the last level, the resampling module ``name``."""
    module = nn.Module()
    module.block = nn.ModuleList(blocks)
    module.attn = nn.ModuleList()
    if resample is not None:
        module.add_module(name, resample)
    return module


def middle(channels: int) -> nn.Module:
    """The middle of encoder and decoder: resnet, attention, resnet."""
    module = nn.Module()
    module.block_1 = ResnetBlock(channels, channels)
    module.attn_1 = AttnBlock(channels)
    module.block_2 = ResnetBlock(channels, channels)
    return module


def run_middle(module: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """``h`` through a :func:`middle`."""
    return module.block_2(module.attn_1(module.block_1(h)))


class Encoder(nn.Module):
    """Image ``[b, in_channels, H, W]`` -> ``[b, 2 * z_channels, H / f, W / f]`` (mean and log
    variance), ``f = 2 ** (len(ch_mult) - 1)``."""

    def __init__(self, config: model_config.AutoEncoder.Config):
        super().__init__()
        ch, mult = config.ch, (1, *config.ch_mult)
        self.conv_in = conv3x3(config.in_channels, ch)
        self.down = nn.ModuleList()
        last = len(config.ch_mult) - 1
        for index, channels in enumerate(config.ch_mult):
            block_in, block_out = ch * mult[index], ch * channels
            blocks = [
                ResnetBlock(block_in if j == 0 else block_out, block_out)
                for j in range(config.num_res_blocks)
            ]
            resample = Downsample(block_out) if index != last else None
            self.down.append(level(blocks, resample, "downsample"))
        top = ch * config.ch_mult[-1]
        self.mid = middle(top)
        self.norm_out = group_norm(top)
        self.conv_out = conv3x3(top, 2 * config.z_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mean and log variance of the latent of ``x``, concatenated over channels."""
        h = self.conv_in(x)
        for down in self.down:
            for block in down.block:
                h = block(h)
            if hasattr(down, "downsample"):
                h = down.downsample(h)
        h = run_middle(self.mid, h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    """Latent ``[b, z_channels, h, w]`` -> image ``[b, out_ch, h * f, w * f]``.

    ``up[i]`` is resolution level ``i`` (0 the finest), run from the coarsest: FLUX.1's order of
    names, which is the reverse of the order they run in.
    """

    def __init__(self, config: model_config.AutoEncoder.Config):
        super().__init__()
        ch = config.ch
        block_in = ch * config.ch_mult[-1]
        self.conv_in = conv3x3(config.z_channels, block_in)
        self.mid = middle(block_in)
        levels: list[nn.Module] = []
        for index in reversed(range(len(config.ch_mult))):
            block_out = ch * config.ch_mult[index]
            blocks = []
            for _ in range(config.num_res_blocks + 1):
                blocks.append(ResnetBlock(block_in, block_out))
                block_in = block_out
            resample = Upsample(block_out) if index != 0 else None
            levels.insert(0, level(blocks, resample, "upsample"))
        self.up = nn.ModuleList(levels)
        self.norm_out = group_norm(block_in)
        self.conv_out = conv3x3(block_in, config.out_ch)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """The image of latent ``z``."""
        h = run_middle(self.mid, self.conv_in(z))
        # The levels run in the parameters' dtype (the middle may have run in z's).
        h = h.to(self.conv_out.weight.dtype)
        for up in reversed(self.up):
            for block in up.block:
                h = block(h)
            if hasattr(up, "upsample"):
                h = up.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class AutoEncoder(nn.Module):
    """The FLUX.1 autoencoder: ``encode`` images to normalised latents, ``decode`` them back."""

    Config = model_config.AutoEncoder.Config

    def __init__(self, *, config: model_config.AutoEncoder.Config):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)

    def latent_distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log variance of the diagonal Gaussian over the (raw) latent of ``x``."""
        mean, logvar = torch.chunk(self.encoder(x), 2, dim=1)
        return mean, logvar

    def encode(self, x: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """A latent sampled for images ``x`` in [-1, 1], shifted and scaled
        (``scale_factor * (z - shift_factor)``)."""
        mean, logvar = self.latent_distribution(x)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return self.normalise(mean + torch.exp(0.5 * logvar) * noise)

    def normalise(self, z: torch.Tensor) -> torch.Tensor:
        """Raw latent -> the latent the transformer sees."""
        return self.config.scale_factor * (z - self.config.shift_factor)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images in about [-1, 1] of normalised latents ``z`` (``encode``'s inverse)."""
        return self.decoder(z / self.config.scale_factor + self.config.shift_factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x))``."""
        return self.decode(self.encode(x))


def load_autoencoder(
    config: model_config.AutoEncoder.Config,
    *,
    path: str,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
) -> AutoEncoder:
    """The autoencoder of ``config`` with the weights of ``path`` (FLUX.1's ``ae.safetensors``
    naming), frozen, in eval mode, on ``device`` in ``dtype``.

    Raises :class:`AutoEncoderLoadError` naming ``encoder.autoencoder_path`` when the file is
    missing, unreadable, or holds other tensors than the config's autoencoder has.
    """
    state = read_checkpoint(path)
    with torch.device("meta"):
        autoencoder = AutoEncoder(config=config)
    expected = autoencoder.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    wrong_shape = sorted(
        k for k in expected.keys() & state.keys() if expected[k].shape != state[k].shape
    )
    problems = [
        f"{words} {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
        for words, names in (
            ("lacks", missing),
            ("has unknown tensors", unexpected),
            ("has other shapes for", wrong_shape),
        )
        if names
    ]
    if problems:
        raise AutoEncoderLoadError(
            f"{CONFIG_KEY} {path!r} is not this autoencoder's checkpoint: it "
            + "; it ".join(problems)
            + " (is model.autoencoder set to the shape of the checkpoint?)"
        )
    autoencoder.load_state_dict(state, assign=True)
    autoencoder = autoencoder.to(device=device, dtype=dtype).eval()
    autoencoder.requires_grad_(False)
    return autoencoder


def read_checkpoint(path: str) -> dict[str, Any]:
    """The tensors of safetensors file ``path``; :class:`AutoEncoderLoadError` when missing or
    unreadable."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not os.path.isfile(path):
        what = "is a folder, not" if os.path.isdir(path) else "does not exist; it should be"
        raise AutoEncoderLoadError(
            f"{CONFIG_KEY} {path!r} {what} a safetensors file "
            "(FLUX.1's ae.safetensors, downloaded beforehand)"
        )
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise AutoEncoderLoadError(
            f"{CONFIG_KEY} {path!r} is not a readable safetensors file: {exc}"
        ) from None


__all__ = ["AutoEncoder", "AutoEncoderLoadError", "load_autoencoder"]
