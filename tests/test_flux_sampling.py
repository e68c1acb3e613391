"""flux's sampling arithmetic on hand-checked cases: 2x2 patch packing, position ids, the shifted
timestep schedule, Euler steps with and without classifier-free guidance, and the loop driving a
real (small) transformer."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from tests.test_flux_model import random_model, small_with_guidance
from titan.models.flux import sampling


def test_pack_latents_takes_2x2_patches_row_by_row():
    latents = torch.arange(2 * 4 * 4, dtype=torch.float32).view(1, 2, 4, 4)
    packed = sampling.pack_latents(latents)
    assert packed.shape == (1, 4, 8)
    # Patch (0, 1) is token 1: channel 0's pixels (0,2) (0,3) (1,2) (1,3), then channel 1's.
    assert packed[0, 1].tolist() == [2, 3, 6, 7, 18, 19, 22, 23]
    assert packed[0, 2].tolist() == [8, 9, 12, 13, 24, 25, 28, 29]
    assert torch.equal(sampling.unpack_latents(packed, height=4, width=4), latents)
    wide = torch.randn(3, 16, 6, 10)
    assert torch.equal(
        sampling.unpack_latents(sampling.pack_latents(wide), height=6, width=10), wide
    )
    with pytest.raises(ValueError, match="must be even, got 5x4"):
        sampling.pack_latents(torch.zeros(1, 1, 5, 4))
    with pytest.raises(ValueError, match="4 patches of 8 channels are not a 6x4 latent"):
        sampling.unpack_latents(packed, height=6, width=4)


def test_position_ids_of_latent_patches_and_text():
    ids = sampling.latent_position_ids(2, height=4, width=6)
    expected = [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
    assert ids.shape == (2, 6, 3) and ids[1].tolist() == expected
    text = sampling.text_position_ids(2, tokens=5)
    assert text.shape == (2, 5, 3) and not text.any()
    assert sampling.noise_latent(2, image_height=64, image_width=32).shape == (2, 16, 8, 4)


def test_schedule_by_hand():
    assert sampling.get_schedule(4, 256, shift=False) == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert sampling.schedule_shift(256) == 0.5
    assert sampling.schedule_shift(4096) == pytest.approx(1.15)
    assert sampling.schedule_shift(2176) == pytest.approx(0.825)  # halfway along the line
    # mu = 0.5 at 256 tokens: t -> e^.5 / (e^.5 + 1/t - 1).
    e = math.exp(0.5)
    expected = [1.0, e / (e + 1 / 3), e / (e + 1), e / (e + 3), 0.0]
    assert sampling.get_schedule(4, 256) == pytest.approx(expected, abs=1e-6)
    assert sampling.get_schedule(4, 256)[2] == pytest.approx(0.622459, abs=1e-6)
    # A longer sequence shifts more steps toward noise.
    assert sampling.get_schedule(4, 4096)[2] > sampling.get_schedule(4, 256)[2]
    with pytest.raises(ValueError, match="at least one step, got 0"):
        sampling.get_schedule(0, 256)


def _text(batch: int, value: float) -> sampling.Conditioning:
    return sampling.Conditioning(
        t5_encodings=torch.full((batch, 3, 4), value), clip_encodings=torch.full((batch, 2), value)
    )


def test_euler_steps_by_hand():
    calls = []

    def velocity_is_x(**kwargs):
        calls.append(kwargs)
        return kwargs["img"]

    x0 = torch.randn(1, 16, 4, 4)
    out = sampling.denoise(
        velocity_is_x, latents=x0, conditioning=_text(1, 1.0), timesteps=[1.0, 0.5, 0.0]
    )
    # dx/dt = x stepped from 1 to 0 by -0.5 twice: x0 * (1 - 0.5) ** 2.
    torch.testing.assert_close(out, x0 / 4)
    assert [c["timesteps"].tolist() for c in calls] == [[1.0], [0.5]]
    assert calls[0]["img"].shape == (1, 4, 64) and calls[0]["img_ids"][0, 3].tolist() == [0, 1, 1]
    assert calls[0]["txt_ids"].shape == (1, 3, 3) and "guidance" not in calls[0]


def test_classifier_free_guidance_by_hand():
    seen = []

    def velocity_of_text(**kwargs):
        seen.append(kwargs["y"][:, 0].tolist())
        # Velocity 1 for the empty prompt's rows, 3 for the prompt's.
        return torch.ones_like(kwargs["img"]) * kwargs["y"][:, :1, None]

    x0 = torch.zeros(2, 16, 2, 2)
    out = sampling.denoise(
        velocity_of_text,
        latents=x0,
        conditioning=_text(2, 3.0),
        unconditional=_text(2, 1.0),
        timesteps=[1.0, 0.0],
        guidance_scale=5.0,
        guidance=3.5,
    )
    # One step of -1 * (v_u + 5 (v_c - v_u)) = -(1 + 5 * 2) = -11, for the conditional rows.
    assert seen == [[1.0, 1.0, 3.0, 3.0]]
    assert out.shape == (2, 16, 2, 2) and torch.all(out == -11)


def test_denoise_runs_the_transformer():
    config = small_with_guidance()
    config = dataclasses.replace(config, in_channels=64, out_channels=64)
    model = random_model(config)
    text = sampling.Conditioning(
        t5_encodings=torch.randn(1, 5, config.context_in_dim),
        clip_encodings=torch.randn(1, config.vec_in_dim),
    )
    with torch.no_grad():
        out = sampling.denoise(
            model,
            latents=sampling.noise_latent(1, image_height=32, image_width=48),
            conditioning=text,
            timesteps=sampling.get_schedule(2, 6),
            guidance=3.5,
        )
    assert out.shape == (1, 16, 4, 6) and torch.isfinite(out).all()
