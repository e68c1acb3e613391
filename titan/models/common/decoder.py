"""A decoder-only language model: embeddings, a stack of identical blocks, norm and output."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Literal

from titan.config.configurable import Configurable
from titan.models.common.attention import Attention, BaseAttention
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.common.rope import RoPE
from titan.protocols.module import AttentionHeads, BaseModel, Module
from titan.schemas.ranges import POSITIVE, POSITIVE_NUMBER


class TransformerBlock(Module):
    """Pre-norm block: ``x + attention(norm(x))``, then ``+ feed_forward(norm(x))`` or the MoE."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """One decoder block; the decoder builds it once per layer with the layer's index."""

        _owner_path = "titan.models.common.model:TransformerBlock"

        attention: BaseAttention.Config = field(default_factory=Attention.Config)
        """Self-attention of the block."""
        feed_forward: FeedForward.Config | None = field(default_factory=FeedForward.Config)
        """Dense feed-forward, used by the layers that are not MoE layers."""
        moe: MoE.Config | None = None
        """Mixture of experts used instead of the dense feed-forward; None for a dense model."""
        init_std: Literal["by_layer", "by_n_layers"] = "by_layer"
        """Output-projection init std: 0.02/sqrt(2*(layer_id+1)), or 0.02/sqrt(2*n_layers)."""

        def uses_moe(self, layer_id: int) -> bool:
            """Whether layer ``layer_id`` runs the MoE instead of the dense feed-forward."""
            return self.moe is not None

        def moe_hidden_dim(self, dim: int) -> int:
            """Hidden size of one expert in a model of width ``dim``."""
            if self.moe is not None and self.moe.hidden_dim is not None:
                return self.moe.hidden_dim
            if self.feed_forward is None:
                raise ValueError("moe.hidden_dim must be set when the block has no feed_forward")
            return self.feed_forward.effective_hidden_dim(dim)

        def expert_params(self, dim: int) -> int:
            """Parameters of one routed expert (a SwiGLU: w1, w2, w3 without biases)."""
            return 3 * dim * self.moe_hidden_dim(dim)

        def active_params(self, layer_id: int, dim: int) -> int:
            """Parameters one token runs through in layer ``layer_id``: all of a dense layer; of
            an MoE layer the router, the shared experts and ``top_k`` of the routed experts."""
            total = self.num_params(layer_id, dim)
            if not self.uses_moe(layer_id):
                return total
            assert self.moe is not None
            idle = self.moe.num_experts - self.moe.top_k
            return total - idle * self.expert_params(dim)

        def num_params(self, layer_id: int, dim: int) -> int:
            """Parameters of layer ``layer_id``: attention, feed-forward or MoE, two norms."""
            if self.uses_moe(layer_id):
                assert self.moe is not None
                ffn = self.moe.num_params(dim, self.moe_hidden_dim(dim))
            elif self.feed_forward is not None:
                ffn = self.feed_forward.num_params(dim)
            else:
                raise ValueError(f"layer {layer_id} is dense but the block has no feed_forward")
            return self.attention.num_params(dim) + ffn + 2 * dim


class Decoder(BaseModel):
    """A decoder-only transformer language model (not buildable itself: each family is)."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseModel.Config):
        """Width, depth and vocabulary of a decoder, with its rope and its block."""

        _ranges = {
            "dim": POSITIVE,
            "n_layers": POSITIVE,
            "vocab_size": POSITIVE,
            "norm_eps": POSITIVE_NUMBER,
            "max_seq_len": POSITIVE,
        }

        dim: int = 256
        """Model width: the size of every token's hidden state."""
        n_layers: int = 2
        """Number of transformer blocks."""
        vocab_size: int = 2048
        """Number of token embeddings; must cover the tokenizer's vocabulary."""
        norm_eps: float = 1e-5
        """Epsilon of every RMSNorm."""
        max_seq_len: int = 2048
        """Longest sequence the rope tables cover; the trainer sets it to training.seq_len."""
        rope: RoPE.Config = field(default_factory=RoPE.Config)
        """Rotary position embedding shared by all blocks."""
        layer: TransformerBlock.Config = field(default_factory=TransformerBlock.Config)
        """The block every layer is built from."""

        def update_from_config(self, *, trainer_config: Any) -> None:
            """Take the sequence length and the MoE load-balance debug switch from the trainer."""
            self.max_seq_len = trainer_config.training.seq_len
            if self.layer.moe is not None:
                self.layer.moe.force_load_balance = trainer_config.debug.moe_force_load_balance

        def output_params(self) -> int:
            """Parameters of the output projection (none when tied to the embeddings)."""
            return self.vocab_size * self.dim

        def num_params(self) -> int | None:
            """Parameters of embeddings, blocks, final norm and output (buffers excluded)."""
            blocks = sum(self.layer.num_params(i, self.dim) for i in range(self.n_layers))
            return self.vocab_size * self.dim + blocks + self.dim + self.output_params()

        def attention_heads(self) -> AttentionHeads | None:
            """Query and key/value heads of the block's attention (every layer has the same)."""
            attention = self.layer.attention
            return AttentionHeads(n_heads=attention.n_heads, n_kv_heads=attention.kv_heads())

        def has_moe(self) -> bool | None:
            """Whether any layer runs the mixture of experts."""
            return any(self.layer.uses_moe(i) for i in range(self.n_layers))

        def flops_per_token(self, seq_len: int) -> int | None:
            """Training FLOPs per token (torchtitan's formula, PaLM appendix B).

            6 per active non-embedding parameter (2 forward, 4 backward), counting of an MoE
            layer only the experts a token is routed to; attention adds 6·L·H·(qk + v head
            width)·T (12·L·H·D·T when both widths are D): 2 matmuls forward and 4 backward, 2
            FLOPs per multiply-add, no causal-mask discount, flash recomputation not counted.
            Only the token embedding is a lookup; the output projection is a matmul and counts.
            """
            head_dims = self.layer.attention.flops_head_dims(self.dim)
            if head_dims is None:
                return None
            blocks = sum(self.layer.active_params(i, self.dim) for i in range(self.n_layers))
            matmul_params = blocks + self.dim + self.output_params()
            attention = 6 * self.n_layers * self.layer.attention.n_heads * head_dims * seq_len
            return 6 * matmul_params + attention
