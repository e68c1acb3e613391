"""Pictures from a Flux model: captions to images by Euler denoising (with classifier-free
guidance when asked) and the autoencoder's decoder, and PNG files of them.

Validation and inference share this; both decode at the training image size rounded down to a
multiple of 16 (two latent patches), as torchtitan v0.2.2 did.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from titan.models.flux.sampling import Conditioning, denoise, get_schedule, noise_latent

PNG_TEXT_KEY = "prompt"
"""The PNG text chunk that carries an image's caption."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sampling:
    """How images are drawn: size, Euler steps, classifier-free guidance."""

    img_size: int
    """The requested image side in pixels."""
    denoising_steps: int
    """Euler steps from noise to image."""
    guidance: bool
    """Whether classifier-free guidance mixes in the empty caption's velocity."""
    guidance_scale: float
    """The guidance scale."""

    @property
    def side(self) -> int:
        """The image side in pixels: ``img_size`` rounded down to a multiple of 16."""
        return 16 * (self.img_size // 16)


def check_sampling(sampling: Sampling, *, where: str) -> None:
    """``ValueError`` for a sampling setting no image can be drawn with; ``where`` names the
    config keys' section."""
    if sampling.side < 16:
        raise ValueError(
            f"{where}: images of {sampling.img_size}px are too small to sample; the side must "
            "be at least 16 pixels (two 2x2 patches of 8-pixel latents)"
        )
    if sampling.denoising_steps < 1:
        raise ValueError(
            f"{where}: denoising_steps must be at least 1, not {sampling.denoising_steps}"
        )


def tokens_of(tokenizers: Any, prompts: list[str], device: torch.device) -> dict[str, Any]:
    """The T5 and CLIP token tensors of ``prompts``."""
    return {
        "t5_tokens": torch.tensor([tokenizers.t5.encode(p) for p in prompts], device=device),
        "clip_tokens": torch.tensor([tokenizers.clip.encode(p) for p in prompts], device=device),
    }


@torch.no_grad()
def generate_images(
    model: Any,
    *,
    frozen: Any,
    tokenizers: Any,
    prompts: list[str],
    sampling: Sampling,
    generator: torch.Generator,
) -> torch.Tensor:
    """Images ``[len(prompts), 3, side, side]`` in about [-1, 1], one per prompt."""
    device = frozen.device
    text = frozen.text(tokens_of(tokenizers, prompts, device))
    unconditional = None
    if sampling.guidance:
        unconditional = frozen.text(tokens_of(tokenizers, [""] * len(prompts), device))
    latents = noise_latent(
        len(prompts), image_height=sampling.side, image_width=sampling.side, generator=generator
    ).to(device=device, dtype=text.t5_encodings.dtype)
    height, width = latents.shape[-2:]
    timesteps = get_schedule(sampling.denoising_steps, (height // 2) * (width // 2), shift=True)
    latents = denoise(
        model,
        latents=latents,
        conditioning=Conditioning(
            t5_encodings=text.t5_encodings, clip_encodings=text.clip_encodings
        ),
        timesteps=timesteps,
        unconditional=unconditional,
        guidance_scale=sampling.guidance_scale,
    )
    return frozen.autoencoder.decode(latents.to(frozen.dtype)).float()


def save_png(image: torch.Tensor, *, path: str, prompt: str) -> None:
    """Write one ``[3, H, W]`` image in [-1, 1] as an 8-bit RGB PNG, its caption in the PNG's
    ``prompt`` text; written whole to a temporary name first, so no half file is left."""
    from PIL import Image, PngImagePlugin

    pixels = ((image.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    array = pixels.permute(1, 2, 0).cpu().numpy()
    info = PngImagePlugin.PngInfo()
    info.add_text(PNG_TEXT_KEY, prompt)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = f"{path}.partial"
    Image.fromarray(array, mode="RGB").save(partial, format="PNG", pnginfo=info)
    os.replace(partial, path)


__all__ = ["PNG_TEXT_KEY", "Sampling", "check_sampling", "generate_images", "save_png"]
