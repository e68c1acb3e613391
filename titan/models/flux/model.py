"""The torch modules behind flux's transformer configs: ``FluxModel`` and ``FluxRoPE`` (the
autoencoder's is ``titan.models.flux.autoencoder``).

Build on the meta device, ``to_empty(device=...)``, then ``init_weights()``, as every titan
model; the transformer holds no buffers (its rope rotations come from the position ids of each
batch), so nothing else needs recomputing after a move.
"""

from __future__ import annotations

import torch
from torch import nn

from titan.models.flux import model_config
from titan.models.flux.layers import (
    TIMESTEP_EMBED_DIM,
    DoubleStreamBlock,
    LastLayer,
    MLPEmbedder,
    SingleStreamBlock,
    rope_rotations,
    timestep_embedding,
    xavier_linear,
)


class FluxRoPE(nn.Module):
    """Rotary embedding over several position axes: axis ``i`` of a position id rotates a band
    of ``axes_dim[i]`` channels of each head, the bands side by side."""

    Config = model_config.FluxRoPE.Config

    def __init__(self, *, config: model_config.FluxRoPE.Config, head_dim: int):
        super().__init__()
        if sum(config.axes_dim) != head_dim:
            raise ValueError(
                f"rope.axes_dim {tuple(config.axes_dim)} adds up to {sum(config.axes_dim)}, "
                f"but each head is hidden_size // num_heads = {head_dim} wide"
            )
        self.config = config

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``[bs, 1, seq, head_dim // 2, 2, 2]`` rotations of position ids ``[bs, seq, axes]``."""
        if ids.shape[-1] != len(self.config.axes_dim):
            raise ValueError(
                f"position ids have {ids.shape[-1]} axes, rope.axes_dim has "
                f"{len(self.config.axes_dim)}"
            )
        bands = [
            rope_rotations(ids[..., axis], dim=dim, theta=self.config.theta)
            for axis, dim in enumerate(self.config.axes_dim)
        ]
        return torch.cat(bands, dim=-3).unsqueeze(1)


class FluxModel(nn.Module):
    """FLUX.1: predicts the flow velocity of packed image latents, conditioned on T5 token
    encodings (``txt``), a pooled CLIP encoding (``y``), the timestep and, when the config embeds
    it, a guidance strength.

    Double-stream blocks keep image and text weights apart, single-stream blocks run the joined
    sequence; every block is modulated by ``vec`` (timestep + pooled text [+ guidance]).
    """

    Config = model_config.FluxModel.Config

    def __init__(self, *, config: model_config.FluxModel.Config):
        super().__init__()
        if config.hidden_size % config.num_heads:
            raise ValueError(
                f"hidden_size {config.hidden_size} is not divisible by num_heads {config.num_heads}"
            )
        self.config = config
        hidden = config.hidden_size
        self.pe_embedder = config.rope.build(head_dim=hidden // config.num_heads)
        self.img_in = nn.Linear(config.in_channels, hidden, bias=True)
        self.time_in = MLPEmbedder(TIMESTEP_EMBED_DIM, hidden_dim=hidden)
        self.vector_in = MLPEmbedder(config.vec_in_dim, hidden_dim=hidden)
        # Absent (not an unused module) without guidance, so the state dict matches the weights
        # of a model that has none.
        self.guidance_in = (
            MLPEmbedder(TIMESTEP_EMBED_DIM, hidden_dim=hidden) if config.guidance_embed else None
        )
        self.txt_in = nn.Linear(config.context_in_dim, hidden)
        block = {"num_heads": config.num_heads, "mlp_ratio": config.mlp_ratio}
        self.double_blocks = nn.ModuleList(
            DoubleStreamBlock(hidden, qkv_bias=config.qkv_bias, **block)
            for _ in range(config.depth)
        )
        self.single_blocks = nn.ModuleList(
            SingleStreamBlock(hidden, **block) for _ in range(config.depth_single_blocks)
        )
        self.final_layer = LastLayer(hidden, out_channels=config.out_channels)

    def embedders(self) -> list[nn.Module]:
        """The modules before the blocks, in v0.2.2's order (guidance last, when present)."""
        modules = [self.img_in, self.time_in, self.vector_in, self.txt_in, self.guidance_in]
        return [module for module in modules if module is not None]

    def init_weights(self, buffer_device: torch.device | str | None = None) -> None:
        """Initialise every parameter as torchtitan v0.2.2 does (DiT's scheme): xavier input
        projections and blocks, std-0.02 embedders, zero modulations and output layer.

        ``buffer_device`` is accepted for the trainer's common call; flux has no buffers.
        """
        xavier_linear(self.img_in)
        xavier_linear(self.txt_in)
        for embedder in (self.time_in, self.vector_in, self.guidance_in):
            if embedder is not None:
                embedder.init_weights()
        for block in (*self.single_blocks, *self.double_blocks):
            block.init_weights()
        self.final_layer.init_weights()

    def needs_documents(self) -> bool:
        """Flux attends over whole images and captions, never by document."""
        return False

    def fsdp_units(self) -> list[list[nn.Module]]:
        """What FSDP shards one by one (``titan.distributed.parallelize.apply_fsdp``): each
        embedder, each block, then the final layer, as v0.2.2 sharded them."""
        blocks = [*self.double_blocks, *self.single_blocks]
        return [*([m] for m in self.embedders()), *([b] for b in blocks), [self.final_layer]]

    def forward(
        self,
        img: torch.Tensor,
        img_ids: torch.Tensor,
        txt: torch.Tensor,
        txt_ids: torch.Tensor,
        y: torch.Tensor,
        timesteps: torch.Tensor,
        guidance: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Velocity ``[bs, L_img, out_channels]`` of packed latents ``img`` ``[bs, L_img,
        in_channels]`` at ``timesteps`` ``[bs]`` (in [0, 1]).

        ``img_ids`` / ``txt_ids`` ``[bs, L, len(axes_dim)]`` are the tokens' positions
        (``titan.models.flux.sampling``), ``txt`` ``[bs, L_txt, context_in_dim]`` the T5
        encodings, ``y`` ``[bs, vec_in_dim]`` the pooled CLIP encoding, ``guidance`` ``[bs]``
        the guidance strength, required exactly when the config embeds guidance.
        """
        if img.ndim != 3 or txt.ndim != 3:
            raise ValueError(
                f"img and txt must be [batch, tokens, channels], got {img.ndim} and {txt.ndim} "
                "dimensions"
            )
        if (guidance is None) != (self.guidance_in is None):
            raise ValueError(
                "this flux model embeds guidance: pass guidance"
                if guidance is None
                else "this flux model has no guidance embedding (guidance_embed = False)"
            )
        vec = self.time_in(timestep_embedding(timesteps).to(img.dtype))
        if self.guidance_in is not None:
            vec = vec + self.guidance_in(timestep_embedding(guidance).to(img.dtype))
        vec = vec + self.vector_in(y)
        img = self.img_in(img)
        txt = self.txt_in(txt)
        pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1))
        for block in self.double_blocks:
            img, txt = block(img, txt, vec=vec, pe=pe)
        joined = torch.cat((txt, img), dim=1)
        for block in self.single_blocks:
            joined = block(joined, vec=vec, pe=pe)
        return self.final_layer(joined[:, txt.shape[1] :], vec)


__all__ = ["FluxModel", "FluxRoPE"]
