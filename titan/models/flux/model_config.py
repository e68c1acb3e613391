"""flux's model config: the FLUX.1 diffusion transformer and the autoencoder it works in."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from titan.config.configurable import Configurable
from titan.models.common.rope import RoPE
from titan.protocols.module import AttentionHeads, BaseModel, Module
from titan.schemas.ranges import NON_NEGATIVE, POSITIVE, POSITIVE_NUMBER


class AutoEncoder(Module):
    """The image autoencoder whose latent space the transformer denoises (frozen in training)."""

    # torchtitan's AutoEncoderParams defaults: the shape of FLUX.1's pretrained autoencoder,
    # whose weights training loads from a checkpoint, so they must match it.
    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Shape and latent normalisation of the FLUX.1 autoencoder."""

        _owner_path = "titan.models.flux.autoencoder:AutoEncoder"
        _ranges = {
            "resolution": POSITIVE,
            "in_channels": POSITIVE,
            "ch": POSITIVE,
            "out_ch": POSITIVE,
            "num_res_blocks": POSITIVE,
            "z_channels": POSITIVE,
            "scale_factor": POSITIVE_NUMBER,
        }

        resolution: int = 256
        """Image resolution the autoencoder was built for."""
        in_channels: int = 3
        """Channels of the input images."""
        ch: int = 128
        """Base channel count of the encoder and decoder."""
        out_ch: int = 3
        """Channels of the decoded images."""
        ch_mult: tuple[int, ...] = (1, 2, 4, 4)
        """Channel multiplier of each resolution level."""
        num_res_blocks: int = 2
        """Residual blocks per resolution level."""
        z_channels: int = 16
        """Channels of the latent."""
        scale_factor: float = 0.3611
        """Scale applied to latents after shifting, to give them unit variance."""
        shift_factor: float = 0.1159
        """Shift subtracted from latents before scaling."""


class FluxRoPE(RoPE):
    """Rotary embedding over several position axes (time, height, width), one band per axis."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(RoPE.Config):
        """Multi-axis rope; the widths in axes_dim add up to the head width."""

        _owner_path = "titan.models.flux.model:FluxRoPE"

        # FLUX.1's split of a 128-wide head, matching the default hidden_size / num_heads.
        axes_dim: tuple[int, ...] = (16, 56, 56)
        """Rope width of each position axis; they must add up to hidden_size // num_heads."""


class FluxModel(BaseModel):
    """FLUX.1: a rectified-flow transformer of double-stream then single-stream blocks."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseModel.Config):
        """A flux model: transformer sizes, text conditioning widths and the autoencoder."""

        _owner_path = "titan.models.flux.model:FluxModel"
        _ranges = {
            "in_channels": POSITIVE,
            "out_channels": POSITIVE,
            "vec_in_dim": POSITIVE,
            "context_in_dim": POSITIVE,
            "hidden_size": POSITIVE,
            "mlp_ratio": POSITIVE_NUMBER,
            "num_heads": POSITIVE,
            "depth": POSITIVE,
            "depth_single_blocks": NON_NEGATIVE,
        }

        # Tied to the autoencoder: 16 latent channels packed in 2x2 patches.
        in_channels: int = 64
        """Channels of each packed latent patch fed to the transformer."""
        out_channels: int = 64
        """Channels of each predicted latent patch."""
        # Tied to the text encoders every flux flavor uses: CLIP-L pooled, T5-XXL sequence.
        vec_in_dim: int = 768
        """Width of the pooled CLIP text embedding."""
        context_in_dim: int = 4096
        """Width of the T5 text-encoding tokens."""
        hidden_size: int = 512
        """Width of the transformer."""
        mlp_ratio: float = 4.0
        """Hidden size of each block's MLP as a multiple of hidden_size."""
        num_heads: int = 4
        """Number of attention heads."""
        depth: int = 2
        """Number of double-stream blocks (separate image and text weights)."""
        depth_single_blocks: int = 2
        """Number of single-stream blocks (image and text tokens concatenated)."""
        qkv_bias: bool = True
        """Whether the query/key/value projections have a bias."""
        # torchtitan v0.2.2 had no guidance embedding in any flavor; FLUX.1-dev's published
        # weights (and diffusers' guidance_embeds) have one, which this switch adds.
        guidance_embed: bool = False
        """Whether the model embeds a guidance strength (guidance_in), as FLUX.1-dev's weights do."""
        rope: FluxRoPE.Config = field(default_factory=FluxRoPE.Config)
        """Rotary embedding of the image and text token positions."""
        autoencoder: AutoEncoder.Config = field(default_factory=AutoEncoder.Config)
        """The autoencoder that maps images to latents and back."""

        def attention_heads(self) -> AttentionHeads | None:
            """Every block's heads: ``num_heads`` queries, keys and values (no grouping)."""
            return AttentionHeads(n_heads=self.num_heads, n_kv_heads=self.num_heads)
