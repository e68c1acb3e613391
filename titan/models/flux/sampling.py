"""The sampling arithmetic flux training, validation and inference share: latents packed into
2x2 patches and back, the position ids of latent patches and text tokens, the timestep schedule,
and the Euler loop that integrates the model's velocity from noise to a latent.

A packed latent is a sequence of patches::

    [b, c, 2h, 2w]  --pack_latents-->  [b, h * w, c * 2 * 2]
    patch (i, j) is token i * w + j; its channels are (c, row in patch, column in patch)

Position ids have three axes (time, row, column): 0 for the first on every token, the patch's
row and column for latents, and all zero for text tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

PATCH = 2
"""Height and width of one latent patch."""
POSITION_AXES = 3
"""Axes of a position id: time, row, column."""
LATENT_CHANNELS = 16
"""Channels of FLUX.1's latents."""
LATENT_DOWNSCALE = 8
"""Image pixels per latent pixel along each side (the autoencoder's 3 halvings)."""
# v0.2.2's schedule shift: a straight line through (256 tokens, 0.5) and (4096 tokens, 1.15).
SHIFT_LINE = ((256, 0.5), (4096, 1.15))


def pack_latents(x: torch.Tensor) -> torch.Tensor:
    """``[b, c, H, W]`` latents -> ``[b, (H/2) * (W/2), c * 4]`` patches (module docstring)."""
    b, c, height, width = x.shape
    if height % PATCH or width % PATCH:
        raise ValueError(f"latent height and width must be even, got {height}x{width}")
    h, w = height // PATCH, width // PATCH
    patches = x.reshape(b, c, h, PATCH, w, PATCH).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(b, h * w, c * PATCH * PATCH)


def unpack_latents(x: torch.Tensor, *, height: int, width: int) -> torch.Tensor:
    """``pack_latents``' inverse: patches -> ``[b, c, height, width]`` latents."""
    b, tokens, channels = x.shape
    h, w = height // PATCH, width // PATCH
    if tokens != h * w or channels % (PATCH * PATCH):
        raise ValueError(
            f"{tokens} patches of {channels} channels are not a {height}x{width} latent"
        )
    c = channels // (PATCH * PATCH)
    pixels = x.reshape(b, h, w, c, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
    return pixels.reshape(b, c, h * PATCH, w * PATCH)


def latent_position_ids(
    batch: int, *, height: int, width: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """``[batch, (height/2) * (width/2), 3]`` float32 ids of a ``height x width`` latent's
    patches: ``(0, row, column)`` in packing order."""
    h, w = height // PATCH, width // PATCH
    ids = torch.zeros(h, w, POSITION_AXES, device=device)
    ids[..., 1] = torch.arange(h, device=device)[:, None]
    ids[..., 2] = torch.arange(w, device=device)[None, :]
    return ids.view(1, h * w, POSITION_AXES).repeat(batch, 1, 1)


def text_position_ids(
    batch: int, *, tokens: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """``[batch, tokens, 3]`` float32 zeros: text tokens are all at the origin."""
    return torch.zeros(batch, tokens, POSITION_AXES, device=device)


def noise_latent(
    batch: int,
    *,
    image_height: int,
    image_width: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Standard normal ``[batch, 16, image_height / 8, image_width / 8]`` latents."""
    shape = (
        batch,
        LATENT_CHANNELS,
        image_height // LATENT_DOWNSCALE,
        image_width // LATENT_DOWNSCALE,
    )
    return torch.randn(shape, generator=generator, dtype=dtype, device=device)


def schedule_shift(
    image_seq_len: int, *, base_shift: float = 0.5, max_shift: float = 1.15
) -> float:
    """``mu`` of a sequence of ``image_seq_len`` latent tokens: linear in the length, through
    ``(256, base_shift)`` and ``(4096, max_shift)``."""
    (x1, _), (x2, _) = SHIFT_LINE
    slope = (max_shift - base_shift) / (x2 - x1)
    return base_shift + slope * (image_seq_len - x1)


def time_shift(mu: float, sigma: float, t: torch.Tensor) -> torch.Tensor:
    """``e^mu / (e^mu + (1/t - 1)^sigma)``: moves timesteps toward 1 (noise) for ``mu > 0``."""
    return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)


def get_schedule(
    num_steps: int,
    image_seq_len: int,
    *,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
    shift: bool = True,
) -> list[float]:
    """``num_steps + 1`` timesteps from 1 (noise) down to 0 (image), evenly spaced, then, with
    ``shift``, time-shifted by ``schedule_shift(image_seq_len)`` so that larger images spend
    more steps at high noise."""
    if num_steps < 1:
        raise ValueError(f"the schedule needs at least one step, got {num_steps}")
    timesteps = torch.linspace(1, 0, num_steps + 1)
    if shift:
        mu = schedule_shift(image_seq_len, base_shift=base_shift, max_shift=max_shift)
        timesteps = time_shift(mu, 1.0, timesteps)
    return timesteps.tolist()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Conditioning:
    """The text conditioning of a batch: T5 token encodings and the pooled CLIP encoding."""

    t5_encodings: torch.Tensor
    """``[b, tokens, context_in_dim]``."""
    clip_encodings: torch.Tensor
    """``[b, vec_in_dim]``."""


Velocity = Callable[..., torch.Tensor]
"""The model: ``velocity(img=, img_ids=, txt=, txt_ids=, y=, timesteps=)`` -> like ``img``."""


def denoise(
    model: Velocity,
    *,
    latents: torch.Tensor,
    conditioning: Conditioning,
    timesteps: list[float],
    unconditional: Conditioning | None = None,
    guidance_scale: float = 5.0,
    guidance: float | None = None,
) -> torch.Tensor:
    """Integrate the velocity of ``model`` from noise ``latents`` ``[b, 16, H, W]`` along
    ``timesteps`` with Euler steps (``x += (t_next - t) * v``); the denoised latents.

    With ``unconditional`` (the encodings of the empty prompt, one row per image), classifier-
    free guidance: each step runs the unconditional and conditional batch together and moves
    both by ``v_u + guidance_scale * (v_c - v_u)``; the conditional half is returned.
    ``guidance`` is the strength a guidance-embedding model (FLUX.1-dev's weights) is given.
    """
    batch, _, height, width = latents.shape
    text = conditioning
    if unconditional is not None:
        latents = torch.cat([latents, latents])
        text = Conditioning(
            t5_encodings=torch.cat([unconditional.t5_encodings, text.t5_encodings]),
            clip_encodings=torch.cat([unconditional.clip_encodings, text.clip_encodings]),
        )
    rows = latents.shape[0]
    img_ids = latent_position_ids(rows, height=height, width=width, device=latents.device)
    txt_ids = text_position_ids(rows, tokens=text.t5_encodings.shape[1], device=latents.device)
    x = pack_latents(latents)
    img_ids, txt_ids = img_ids.to(x), txt_ids.to(x)
    extra = {}
    if guidance is not None:
        extra["guidance"] = torch.full((rows,), guidance, dtype=x.dtype, device=x.device)
    for t_curr, t_next in zip(timesteps[:-1], timesteps[1:], strict=True):
        t = torch.full((rows,), t_curr, dtype=x.dtype, device=x.device)
        velocity = model(
            img=x,
            img_ids=img_ids,
            txt=text.t5_encodings,
            txt_ids=txt_ids,
            y=text.clip_encodings,
            timesteps=t,
            **extra,
        )
        if unconditional is not None:
            v_u, v_c = velocity.chunk(2)
            velocity = (v_u + guidance_scale * (v_c - v_u)).repeat(2, 1, 1)
        x = x + (t_next - t_curr) * velocity
    if unconditional is not None:
        x = x[batch:]
    return unpack_latents(x, height=height, width=width)


__all__ = [
    "Conditioning",
    "LATENT_CHANNELS",
    "LATENT_DOWNSCALE",
    "PATCH",
    "POSITION_AXES",
    "denoise",
    "get_schedule",
    "latent_position_ids",
    "noise_latent",
    "pack_latents",
    "schedule_shift",
    "text_position_ids",
    "time_shift",
    "unpack_latents",
]
