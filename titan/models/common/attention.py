"""Self-attention configs: the fields every attention has, and grouped-query attention."""

from __future__ import annotations

import dataclasses
from typing import Literal

from titan.config.configurable import Configurable
from titan.protocols.module import Module
from titan.schemas.ranges import POSITIVE

AttentionBackend = Literal["sdpa", "flex", "varlen"]
AttentionMask = Literal["causal", "block_causal"]


class BaseAttention(Module):
    """What every attention shares: a head count, a kernel and a mask (not buildable itself)."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Attention heads, kernel and mask."""

        _ranges = {"n_heads": POSITIVE}

        n_heads: int = 4
        """Number of query heads."""
        attn_type: AttentionBackend = "sdpa"
        """Attention kernel: PyTorch SDPA, FlexAttention, or variable-length attention."""
        attn_mask_type: AttentionMask = "causal"
        """Causal over the whole sequence, or block_causal: causal within each document only."""

        def kv_heads(self) -> int:
            """Key/value heads: one per query head unless the attention groups them."""
            return self.n_heads

        def flops_head_dims(self, dim: int) -> int | None:
            """Query/key plus value head width, the attention FLOPs' width per head in a model
            of width ``dim``; None when the attention does not say (FLOPs are then unknown)."""
            return None

        def num_params(self, dim: int) -> int:
            """Parameters of one attention module in a model of width ``dim``."""
            # Abstract: the base has no head size, so each concrete attention counts its own
            # (tests/test_models.py checks that every subclass overrides this).
            raise NotImplementedError(f"{type(self).__qualname__} cannot count its parameters")


class Attention(BaseAttention):
    """Grouped-query attention: ``n_kv_heads`` key/value heads shared by the query heads."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseAttention.Config):
        """Grouped-query attention with heads of width dim // n_heads."""

        _owner_path = "titan.models.common.attention_model:Attention"
        _ranges = {"n_kv_heads": POSITIVE}

        n_kv_heads: int | None = None
        """Number of key/value heads; None means one per query head (no grouping)."""

        def kv_heads(self) -> int:
            """The number of key/value heads after defaulting."""
            return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

        def head_dim_for(self, dim: int) -> int:
            """Width of one head in a model of width ``dim``."""
            return dim // self.n_heads

        def flops_head_dims(self, dim: int) -> int | None:
            """Query/key and value heads have the same width: twice ``head_dim_for``."""
            return 2 * self.head_dim_for(dim)

        def num_params(self, dim: int) -> int:
            """Parameters of the q, k, v and output projections (no biases)."""
            head_dim = self.head_dim_for(dim)
            return 2 * dim * head_dim * (self.n_heads + self.kv_heads())
