"""The torch modules of a llama4 model: iRoPE attention, interleaved MoE blocks, the decoder.

Each class is the ``_owner_path`` target of the config of the same name in
``titan.models.llama4.model_config``. Module and parameter names are torchtitan v0.2.2's
(``attention.wq``, ``moe.router.gate``, ``moe.experts.w1``, ``feed_forward.w1``...), so
checkpoints and the Hugging Face adapter address the same keys; initialization is its too.

Attention. torchtitan serves llama4's chunked attention only with FlexAttention: under
``attn_type="flex"`` the rope layers attend causally within chunks of ``fixed_attn_block_size``
tokens and the no-rope (NoPE) layers attend causally over the whole sequence; under
``attn_mask_type="block_causal"`` (the ``*_irope`` flavors) both also stay within each
document. titan computes the same masks as explicit boolean masks for PyTorch SDPA, on any
device (``titan.models.common.attention_masks``). (v0.2.2's own flex branch hands FlexAttention
its whole dict of masks instead of the layer's mask; titan runs the masks that code selects.)
Under ``attn_type="sdpa"`` chunking is off and NoPE layers still skip rope, exactly as v0.2.2's
sdpa branch. varlen kernels are refused, as torchtitan refuses them for llama4.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from titan.config.configurable import NotBuildableError
from titan.models.common.model import (
    Attention,
    Decoder,
    TransformerBlock,
    block_init_std,
)
from titan.models.llama4 import model_config


def uses_rope(config: model_config.Llama4Attention.Config, layer_id: int) -> bool:
    """Whether layer ``layer_id`` applies rope: all do, except every n-th from layer 0 (iRoPE)."""
    every = config.every_n_layers_nope
    if every is None:
        return True
    if every <= 1:
        raise ValueError(f"every_n_layers_nope must be greater than 1, got {every}")
    return layer_id % every != 0


class Llama4Attention(Attention):
    """Grouped-query attention whose layer decides rope on/off and chunked/global masking."""

    Config = model_config.Llama4Attention.Config

    def __init__(self, *, config: model_config.Llama4Attention.Config, dim: int, layer_id: int):
        if config.attn_type == "varlen":
            raise NotBuildableError(
                "llama4 has no varlen attention (torchtitan refuses it too); "
                "use attn_type 'sdpa' or 'flex'"
            )
        super().__init__(config=config, dim=dim)
        self.use_rope = uses_rope(config, layer_id)
        # Chunking exists only in torchtitan's flex path, and only on rope layers.
        chunked = config.attn_type == "flex" and self.use_rope
        self.chunk_size = config.fixed_attn_block_size if chunked else None
        self.mask_spec = dataclasses.replace(self.mask_spec, chunk_size=self.chunk_size)

    def rotate(
        self, xq: torch.Tensor, xk: torch.Tensor, rotary_table: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys on rope layers; NoPE layers leave them as they are."""
        if not self.use_rope:
            return xq, xk
        return super().rotate(xq, xk, rotary_table)


class Llama4TransformerBlock(TransformerBlock):
    """Pre-norm block whose feed-forward is the MoE on interleaved layers, SwiGLU elsewhere.

    The MoE layers have a ``moe`` submodule and the others a ``feed_forward`` (torchtitan's
    names); the experts' hidden size is ``config.moe_hidden_dim``, auto-scaled by default.
    ``init_weights`` and ``forward`` are the shared block's.
    """

    Config = model_config.Llama4TransformerBlock.Config

    def __init__(
        self,
        *,
        config: model_config.Llama4TransformerBlock.Config,
        layer_id: int,
        dim: int,
        n_layers: int,
        norm_eps: float,
    ):
        # Not TransformerBlock.__init__: it builds the attention without the layer index that
        # decides rope and chunking here; everything else is set up the same way.
        nn.Module.__init__(self)
        if not isinstance(config.attention, model_config.Llama4Attention.Config):
            raise ValueError("a llama4 block needs Llama4Attention (iRoPE-aware) attention")
        self.layer_id = layer_id
        self.moe_enabled = config.uses_moe(layer_id)
        self.attention = config.attention.build(dim=dim, layer_id=layer_id)
        if self.moe_enabled:
            assert config.moe is not None  # uses_moe is False without one
            self.moe = config.moe.build(dim=dim, hidden_dim=config.moe_hidden_dim(dim))
        elif config.feed_forward is None:
            raise ValueError(f"layer {layer_id} is dense but the block has no feed_forward")
        else:
            self.feed_forward = config.feed_forward.build(dim=dim)
        self.attention_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.ffn_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.weight_init_std = block_init_std(config.init_std, layer_id=layer_id, n_layers=n_layers)


class Llama4Model(Decoder):
    """Llama 4 (text): a decoder interleaving MoE and dense blocks, with optional iRoPE.

    Build on the meta device, ``to_empty(device=...)``, then ``init_weights()``, as every titan
    decoder; see the module docstring for which attention masks each flavor runs.
    """

    Config = model_config.Llama4Model.Config


__all__ = [
    "Llama4Attention",
    "Llama4Model",
    "Llama4TransformerBlock",
    "uses_rope",
]
