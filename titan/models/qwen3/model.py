"""The torch modules of a qwen3 model: q/k-normed attention and the (dense or MoE) decoder.

Each class is the ``_owner_path`` target of the config of the same name in
``titan.models.qwen3.model_config``. Module and parameter names are torchtitan v0.2.2's
(``attention.q_norm``, ``moe.router.gate``, ``moe.experts.w1``...), so checkpoints and the Hugging
Face adapter address the same keys; initialization is its too.

Rope. Unlike llama, qwen3 rotates the two *halves* of a head (Hugging Face's ``rotate_half``
layout) by a real cos/sin table, so Hugging Face's q/k weights load without any permutation.
The decoder's ``freqs_cis`` buffer therefore holds ``[max_seq_len, 2 * head_dim]``: the cosines,
then the sines, each repeated over both halves (torchtitan's ``rope_cache``).
"""

from __future__ import annotations

import torch
from torch import nn

from titan.models.common.model import Attention, Decoder, norm_in_weight_dtype
from titan.models.qwen3 import model_config


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` over the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_half_rotary_emb(
    xq: torch.Tensor, xk: torch.Tensor, rope_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``[bs, seq, heads, head_dim]`` queries and keys by the first ``seq`` table rows."""
    bs, seqlen, _, head_dim = xq.shape
    table = rope_cache[:seqlen].view(1, seqlen, 1, 2 * head_dim)
    cos = table[..., :head_dim].to(xq.dtype)
    sin = table[..., head_dim:].to(xq.dtype)
    return xq * cos + rotate_half(xq) * sin, xk * cos + rotate_half(xk) * sin


class Qwen3Attention(Attention):
    """Grouped-query attention with its own head width and RMS-normed query and key heads.

    The norms act on each head (weights of size ``head_dim``) after the projections and before
    rope. Their epsilon is the model's ``norm_eps``, which the decoder sets with ``use_norm_eps``.
    """

    Config = model_config.Qwen3Attention.Config

    def __init__(self, *, config: model_config.Qwen3Attention.Config, dim: int):
        super().__init__(config=config, dim=dim)
        self.q_norm: nn.RMSNorm | None = None
        self.k_norm: nn.RMSNorm | None = None
        if config.qk_norm == "rms_norm":
            self.q_norm = nn.RMSNorm(self.head_dim)
            self.k_norm = nn.RMSNorm(self.head_dim)

    def check_width(self, config: model_config.Qwen3Attention.Config, dim: int) -> None:
        """Nothing to check: qwen3 heads have their own width, independent of ``dim``."""

    def use_norm_eps(self, eps: float) -> None:
        """Set the epsilon of the q/k norms (the model's ``norm_eps``)."""
        for norm in (self.q_norm, self.k_norm):
            if norm is not None:
                norm.eps = eps

    def init_weights(self, init_std: float) -> None:
        """Projections as the shared attention; q/k norms reset to ones."""
        super().init_weights(init_std)
        for norm in (self.q_norm, self.k_norm):
            if norm is not None:
                norm.reset_parameters()

    def project_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values per head, queries and keys RMS-normed per head."""
        xq, xk, xv = super().project_heads(x)
        if self.q_norm is not None and self.k_norm is not None:
            xq, xk = norm_in_weight_dtype(self.q_norm, xq), norm_in_weight_dtype(self.k_norm, xk)
        return xq, xk, xv

    def rotate(
        self, xq: torch.Tensor, xk: torch.Tensor, rotary_table: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate the halves of each head by the cos/sin table."""
        return apply_half_rotary_emb(xq, xk, rotary_table)


class Qwen3Model(Decoder):
    """Qwen3: a dense or mixture-of-experts decoder, its output optionally tied to the embeddings.

    With ``enable_weight_tying`` the output projection and the token embeddings share one
    parameter; ``init_buffers`` ties them again after ``to_empty`` (which unties shared
    parameters), and ``init_weights`` initializes the shared weight as the output projection
    last (torchtitan's order).
    """

    Config = model_config.Qwen3Model.Config

    def __init__(self, *, config: model_config.Qwen3Model.Config):
        super().__init__(config=config)
        for layer in self.layers.values():
            layer.attention.use_norm_eps(config.norm_eps)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the embedding weight with the output projection when the config ties them."""
        if self.config.enable_weight_tying:
            self.output.weight = self.tok_embeddings.weight

    def init_buffers(self, buffer_device: torch.device | str | None = None) -> None:
        """Tie the output to the embeddings again (if configured), then recompute the buffers.

        Both ``init_weights`` and a sharded run that loads its weights call this after
        ``to_empty``, which unties shared parameters.
        """
        self.tie_weights()
        super().init_buffers(buffer_device)

    def rotary_table(self) -> torch.Tensor:
        """``[max_seq_len, 2 * head_dim]``: cos then sin of every position's angles (halves)."""
        freqs = self.rope.inverse_frequencies()
        positions = torch.arange(self.rope.max_seq_len, dtype=freqs.dtype, device=freqs.device)
        angles = torch.outer(positions, freqs).float()
        both_halves = torch.cat([angles, angles], dim=-1)
        return torch.cat([both_halves.cos(), both_halves.sin()], dim=-1)

    def fsdp_units(self) -> list[list[nn.Module]]:
        """FSDP groups: embeddings, each block, norm with output; tied weights share one unit."""
        blocks = [[layer] for layer in self.layers.values()]
        if self.config.enable_weight_tying:
            return [*blocks, [self.tok_embeddings, self.norm, self.output]]
        return [[self.tok_embeddings], *blocks, [self.norm, self.output]]


__all__ = ["Qwen3Attention", "Qwen3Model", "apply_half_rotary_emb", "rotate_half"]
