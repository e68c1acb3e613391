"""flux's flavors, as torchtitan v0.2.2 defines them: one config factory per flavor name.

This table is the source of every flux flavor; ``schemas/flavor_table.py``, the torch-free copy
the validator and the migrator read, is generated from it (``make schema``).
"""

from __future__ import annotations

from collections.abc import Callable

from titan.models.flux.model_config import AutoEncoder, FluxModel, FluxRoPE


def flux(
    *, hidden_size: int, num_heads: int, depth: int, depth_single_blocks: int
) -> FluxModel.Config:
    """A flux model conditioned on CLIP-L (768) and T5-XXL (4096) text encodings, with
    FLUX.1's autoencoder; only the transformer's size differs between flavors."""
    return FluxModel.Config(
        in_channels=64,
        out_channels=64,
        vec_in_dim=768,
        context_in_dim=4096,
        hidden_size=hidden_size,
        mlp_ratio=4.0,
        num_heads=num_heads,
        depth=depth,
        depth_single_blocks=depth_single_blocks,
        qkv_bias=True,
        # No v0.2.2 flavor embedded guidance, flux-dev included.
        guidance_embed=False,
        rope=FluxRoPE.Config(theta=10000, axes_dim=(16, 56, 56)),
        autoencoder=AutoEncoder.Config(
            resolution=256,
            in_channels=3,
            ch=128,
            out_ch=3,
            ch_mult=(1, 2, 4, 4),
            num_res_blocks=2,
            z_channels=16,
            scale_factor=0.3611,
            shift_factor=0.1159,
        ),
    )


def _full() -> FluxModel.Config:
    return flux(hidden_size=3072, num_heads=24, depth=19, depth_single_blocks=38)


FLAVORS: dict[str, Callable[[], FluxModel.Config]] = {
    "flux-dev": _full,
    "flux-schnell": _full,
    "flux-debug": lambda: flux(hidden_size=1536, num_heads=12, depth=2, depth_single_blocks=2),
}
"""Flavor name -> a fresh config of it, in torchtitan's order."""
