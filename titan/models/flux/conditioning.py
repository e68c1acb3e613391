"""The frozen parts of a Flux run and what they make of a batch: the autoencoder turns images into
latents, T5 turns caption tokens into a token sequence and CLIP into one pooled vector.

Every random draw of a step (the autoencoder's latent sample, the flow noise, the timesteps) is
made for the step's whole global batch from a generator keyed on the run's seed, the step and
the micro-batch, and each data-parallel rank takes its own rows. A data-parallel rank reads the
samples whose index is its rank modulo the data-parallel degree, so rank ``r`` holds rows
``r, r + dp, r + 2 dp, ...`` of the global batch: every layout draws the same numbers for the
same sample, and a sharded run trains on what one process would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from titan.models.flux.autoencoder import AutoEncoder, load_autoencoder
from titan.models.flux.encoders import TEST_ENCODER_SEED, TextEncoders, build_text_encoders
from titan.models.flux.sampling import Conditioning, latent_position_ids, text_position_ids

STEP_KEY = (1_000_003, 1_009)
"""Multipliers that fold (seed, step, micro-batch) into one generator seed."""


@dataclasses.dataclass(kw_only=True)
class FrozenParts:
    """The autoencoder and text encoders, on the training device in ``dtype``."""

    autoencoder: AutoEncoder
    """Images to latents and back."""
    encoders: TextEncoders
    """T5 (token sequence) and CLIP (pooled vector)."""
    dtype: torch.dtype
    """The dtype the frozen parts compute in (v0.2.2: the FSDP parameter dtype, else float32)."""
    device: torch.device
    """The training device."""

    @torch.no_grad()
    def text(self, inputs: dict[str, Any]) -> Conditioning:
        """T5 encodings and pooled CLIP encodings of a batch's tokens."""
        t5 = self.encoders.t5(inputs["t5_tokens"].to(self.device))
        clip = self.encoders.clip(inputs["clip_tokens"].to(self.device))
        return Conditioning(t5_encodings=t5.to(self.dtype), clip_encodings=clip.to(self.dtype))

    @torch.no_grad()
    def latents(self, images: torch.Tensor, *, noise: torch.Tensor) -> torch.Tensor:
        """Normalised latents of ``images`` (in [-1, 1]) sampled with the given standard
        normal ``noise`` (shaped like the latents)."""
        mean, logvar = self.autoencoder.latent_distribution(
            images.to(device=self.device, dtype=self.dtype)
        )
        sample = mean + torch.exp(0.5 * logvar) * noise.to(mean)
        return self.autoencoder.normalise(sample)


def build_frozen_parts(
    *,
    encoder: Any,
    model_config: Any,
    tokenizers: Any,
    device: torch.device,
    dtype: torch.dtype,
) -> FrozenParts:
    """The autoencoder of ``encoder.autoencoder_path`` (test mode: randomly initialised from a
    fixed seed) and the T5 and CLIP encoders of ``encoder``, frozen, on ``device`` in ``dtype``.
    A missing file or folder is refused naming its ``encoder.*`` key."""
    if encoder.test_mode:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TEST_ENCODER_SEED)
            autoencoder = AutoEncoder(config=model_config.autoencoder)
        autoencoder = autoencoder.to(device=device, dtype=dtype).eval().requires_grad_(False)
    else:
        autoencoder = load_autoencoder(
            model_config.autoencoder, path=encoder.autoencoder_path, device=device, dtype=dtype
        )
    encoders = build_text_encoders(
        encoder,
        tokenizers=tokenizers,
        context_in_dim=model_config.context_in_dim,
        vec_in_dim=model_config.vec_in_dim,
    )
    encoders = TextEncoders(
        t5=encoders.t5.to(device=device, dtype=dtype),
        clip=encoders.clip.to(device=device, dtype=dtype),
    )
    return FrozenParts(autoencoder=autoencoder, encoders=encoders, dtype=dtype, device=device)


def step_generator(seed: int, *, step: int, micro: int) -> torch.Generator:
    """A CPU generator for micro-batch ``micro`` of ``step``, the same on every rank."""
    a, b = STEP_KEY
    return torch.Generator().manual_seed((seed * a + step * b + micro) % 2**63)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankRows:
    """Which rows of the global batch this data-parallel rank holds."""

    dp_rank: int
    """This rank's data-parallel index."""
    dp_degree: int
    """How many data-parallel ranks share each global batch."""

    def draw(self, shape: tuple[int, ...], generator: torch.Generator, *, uniform: bool = False):
        """This rank's rows of a ``[local batch * dp degree, ...]`` draw (normal or uniform)."""
        full = (shape[0] * self.dp_degree, *shape[1:])
        values = (
            torch.rand(full, generator=generator)
            if uniform
            else torch.randn(full, generator=generator)
        )
        return values[self.dp_rank :: self.dp_degree]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlowBatch:
    """One batch ready for the transformer: noised packed latents, positions, text, target."""

    img: torch.Tensor
    """Noised packed latents ``[b, tokens, 64]``."""
    img_ids: torch.Tensor
    """Their position ids."""
    txt: torch.Tensor
    """T5 encodings."""
    txt_ids: torch.Tensor
    """Their position ids (zeros)."""
    y: torch.Tensor
    """Pooled CLIP encodings."""
    timesteps: torch.Tensor
    """Each row's noise level in [0, 1]."""
    target: torch.Tensor
    """The velocity to learn, ``noise - latents``, packed."""

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The transformer's keyword arguments."""
        return {
            "img": self.img,
            "img_ids": self.img_ids,
            "txt": self.txt,
            "txt_ids": self.txt_ids,
            "y": self.y,
            "timesteps": self.timesteps,
        }


@torch.no_grad()
def flow_batch(
    frozen: FrozenParts,
    inputs: dict[str, Any],
    images: torch.Tensor,
    *,
    rows: RankRows,
    generator: torch.Generator,
    timesteps: torch.Tensor | None = None,
) -> FlowBatch:
    """The flow-matching batch of ``images`` and their tokens: latents ``x``, noise ``n``,
    ``t`` uniform in [0, 1) (or the given ``timesteps``), input ``(1 - t) x + t n``, target
    ``n - x``, both packed into 2x2 patches."""
    from titan.models.flux.sampling import pack_latents

    text = frozen.text(inputs)
    batch, _, height, width = images.shape
    latent_shape = (batch, 16, height // 8, width // 8)
    latents = frozen.latents(images, noise=rows.draw(latent_shape, generator))
    noise = rows.draw(latent_shape, generator).to(latents)
    drawn = rows.draw((batch,), generator, uniform=True)
    t = (drawn if timesteps is None else timesteps).to(latents)
    sigmas = t.view(-1, 1, 1, 1)
    noised = (1 - sigmas) * latents + sigmas * noise
    lh, lw = latents.shape[-2:]
    return FlowBatch(
        img=pack_latents(noised),
        img_ids=latent_position_ids(batch, height=lh, width=lw, device=latents.device).to(latents),
        txt=text.t5_encodings,
        txt_ids=text_position_ids(
            batch, tokens=text.t5_encodings.shape[1], device=latents.device
        ).to(latents),
        y=text.clip_encodings,
        timesteps=t,
        target=pack_latents(noise - latents),
    )


__all__ = [
    "FlowBatch",
    "FrozenParts",
    "RankRows",
    "build_frozen_parts",
    "flow_batch",
    "step_generator",
]
