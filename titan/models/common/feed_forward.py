"""The dense SwiGLU feed-forward of a transformer block."""

from __future__ import annotations

import dataclasses

from titan.config.configurable import Configurable
from titan.protocols.module import Module
from titan.schemas.ranges import POSITIVE, POSITIVE_NUMBER


def llama_hidden_dim(dim: int, *, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """torchtitan's llama rule: 2/3 of 4·dim, times the multiplier, rounded up to multiple_of."""
    # int() after each step, exactly as torchtitan truncates, so 8B gives 14336, not 14337.
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class FeedForward(Module):
    """SwiGLU feed-forward: ``w2(silu(w1(x)) * w3(x))``."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """SwiGLU feed-forward whose hidden size is given, or computed from the model width."""

        _owner_path = "titan.models.common.model:FeedForward"
        _ranges = {
            "hidden_dim": POSITIVE,
            "multiple_of": POSITIVE,
            "ffn_dim_multiplier": POSITIVE_NUMBER,
        }

        hidden_dim: int | None = None
        """Hidden size; None computes it from the model width by the llama rule below."""
        multiple_of: int = 256
        """The computed hidden size is rounded up to a multiple of this (hidden_dim None only)."""
        ffn_dim_multiplier: float | None = None
        """Factor applied to 8/3 of the model width before rounding (hidden_dim None only)."""

        def effective_hidden_dim(self, dim: int) -> int:
            """The hidden size used in a model of width ``dim``."""
            if self.hidden_dim is not None:
                return self.hidden_dim
            return llama_hidden_dim(
                dim, multiple_of=self.multiple_of, ffn_dim_multiplier=self.ffn_dim_multiplier
            )

        def num_params(self, dim: int) -> int:
            """Parameters of the three projections (no biases)."""
            return 3 * dim * self.effective_hidden_dim(dim)
