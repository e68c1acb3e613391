"""The torch modules of a decoder's attention: rotary position embedding (the table and its
rotation of queries and keys), grouped-query causal self-attention, and the masked SDPA it runs.

Each class here is the ``_owner_path`` target of the torch-free config of the same name in
``titan.models.common`` (``RoPE``, ``LlamaRoPE``, ``Attention``); names and initialization are
torchtitan's, as in ``titan.models.common.model``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from titan.config.configurable import NotBuildableError
from titan.models.common import attention as attention_config
from titan.models.common import rope as rope_config
from titan.models.common.attention_masks import MaskSpec
from titan.models.common.cp_attention import ContextParallelMask
from titan.models.common.weight_init import BASE_INIT_STD


class RoPE(nn.Module):
    """Rotary position embedding: builds the complex ``freqs_cis`` table the attention rotates by.

    It holds no tensors itself; the decoder keeps the table as its own non-persistent buffer so
    that it moves with the model and stays out of the state dict.
    """

    Config = rope_config.RoPE.Config

    def __init__(self, *, config: rope_config.RoPE.Config, head_dim: int, max_seq_len: int):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head size, got {head_dim}")
        self.config = config
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len

    def inverse_frequencies(self) -> torch.Tensor:
        """The ``head_dim // 2`` rotation frequencies, on the current default device."""
        exponents = torch.arange(0, self.head_dim, 2)[: self.head_dim // 2].float() / self.head_dim
        return 1.0 / (self.config.theta**exponents)

    def freqs_cis(self) -> torch.Tensor:
        """``[max_seq_len, head_dim // 2]`` complex64 rotations, on the current default device."""
        freqs = self.inverse_frequencies()
        positions = torch.arange(self.max_seq_len, device=freqs.device)
        angles = torch.outer(positions, freqs).float()
        return torch.polar(torch.ones_like(angles), angles)


class LlamaRoPE(RoPE):
    """Rotary position embedding with llama 3.1's optional low-frequency scaling."""

    Config = rope_config.LlamaRoPE.Config

    def inverse_frequencies(self) -> torch.Tensor:
        """The rotation frequencies, scaled the llama 3.1 way when the config asks for it."""
        freqs = super().inverse_frequencies()
        if self.config.scaling == "none":
            return freqs
        return llama_scaled_frequencies(freqs, self.config)


def llama_scaled_frequencies(
    freqs: torch.Tensor, config: rope_config.LlamaRoPE.Config
) -> torch.Tensor:
    """llama 3.1's scaling: slow long wavelengths down, keep short ones, blend in between."""
    original = config.original_max_position_embeddings
    low_freq_wavelen = original / config.low_freq_factor
    high_freq_wavelen = original / config.high_freq_factor
    wavelen = 2 * torch.pi / freqs
    slowed = torch.where(wavelen > low_freq_wavelen, freqs / config.scaling_factor, freqs)
    smooth = (original / wavelen - config.low_freq_factor) / (
        config.high_freq_factor - config.low_freq_factor
    )
    # The blend divides the already-slowed value again, exactly as torchtitan (and Meta's
    # reference) write it; inside the band ``slowed`` equals ``freqs``, so this is the usual mix.
    blended = (1 - smooth) * slowed / config.scaling_factor + smooth * slowed
    in_band = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(in_band, blended, slowed)


def apply_rotary_emb(
    xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``[bs, seq, heads, head_dim]`` queries and keys by the first ``seq`` rotations.

    Adjacent pairs of a head are one complex number (Meta's layout, not Hugging Face's halves;
    the state-dict adapter permutes q/k weights between the two). Computed in float32.
    """
    seqlen = xq.shape[1]
    rotations = freqs_cis[:seqlen].view(1, seqlen, 1, -1)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * rotations).flatten(3)
    xk_out = torch.view_as_real(xk_ * rotations).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[bs, seq, kv_heads, d]`` -> ``[bs, seq, kv_heads * n_rep, d]``, each head repeated."""
    if n_rep == 1:
        return x
    bs, seqlen, n_kv_heads, head_dim = x.shape
    expanded = x.unsqueeze(3).expand(bs, seqlen, n_kv_heads, n_rep, head_dim)
    return expanded.reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)


class Attention(nn.Module):
    """Grouped-query causal self-attention with rotary embeddings, run by PyTorch SDPA.

    ``mask_spec`` is its mask kind: per document under ``block_causal``, else plain causal.
    """

    Config = attention_config.Attention.Config

    def __init__(self, *, config: attention_config.Attention.Config, dim: int):
        super().__init__()
        self.mask_spec = attention_mask_spec(config)
        n_kv_heads = config.kv_heads()
        self.check_width(config, dim)
        if config.n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads {config.n_heads} is not divisible by n_kv_heads {n_kv_heads}"
            )
        self.n_heads = config.n_heads
        self.n_kv_heads = n_kv_heads
        self.n_rep = config.n_heads // n_kv_heads
        self.head_dim = config.head_dim_for(dim)
        self.wq = nn.Linear(dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)

    def check_width(self, config: attention_config.Attention.Config, dim: int) -> None:
        """Raise ``ValueError`` unless the heads split the model width evenly."""
        if dim % config.n_heads:
            raise ValueError(f"dim {dim} is not divisible by n_heads {config.n_heads}")

    def init_weights(self, init_std: float) -> None:
        """q/k/v at std 0.02, the output projection at the block's ``init_std``."""
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=BASE_INIT_STD)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def project_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of ``x``, each ``[bs, seq, local heads, head_dim]``."""
        bs, seqlen, _ = x.shape
        # -1, not n_heads: under tensor parallelism wq/wk/wv are column-sharded, so each rank
        # holds only its local heads.
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        return xq, xk, xv

    def rotate(
        self, xq: torch.Tensor, xk: torch.Tensor, rotary_table: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply the rotary embedding to queries and keys (Meta's complex layout)."""
        return apply_rotary_emb(xq, xk, rotary_table)

    def forward(
        self,
        x: torch.Tensor,
        freqs_cis: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend over ``x`` of shape ``[bs, seq, dim]``: causally, or where the boolean
        ``attention_mask`` (broadcastable to ``[bs, heads, seq, seq]``) allows."""
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.project_heads(x)
        xq, xk = self.rotate(xq, xk, freqs_cis)
        # Under context parallel the key/value heads travel unrepeated (n_rep times less to
        # gather); the CP attention repeats them after the gather.
        n_rep = 1 if isinstance(attention_mask, ContextParallelMask) else self.n_rep
        keys = repeat_kv(xk, n_rep).transpose(1, 2)
        values = repeat_kv(xv, n_rep).transpose(1, 2)
        out = masked_sdpa(xq.transpose(1, 2), keys, values, attention_mask=attention_mask)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))


def masked_sdpa(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None,
    scale: float | None = None,
) -> torch.Tensor:
    """SDPA of ``[bs, heads, seq, d]`` tensors: causal without a mask, else the boolean mask's;
    under context parallel (a ``ContextParallelMask``) over every CP rank's keys and values.

    Every mask titan builds lets each query see itself, so no softmax row is empty.
    """
    if isinstance(attention_mask, ContextParallelMask):
        return attention_mask.attend(queries, keys, values, scale=scale)
    if attention_mask is None:
        return F.scaled_dot_product_attention(queries, keys, values, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=attention_mask, scale=scale
    )


def attention_mask_spec(config: attention_config.BaseAttention.Config) -> MaskSpec:
    """The mask kind of an attention config: per document for ``block_causal``, else causal.

    Raises ``NotBuildableError`` for varlen attention without ``block_causal``, which
    torchtitan refuses too (its varlen metadata only describes documents).
    """
    if config.attn_type == "varlen" and config.attn_mask_type != "block_causal":
        raise NotBuildableError(
            f"attn_type 'varlen' runs only attn_mask_type 'block_causal' (as in torchtitan), "
            f"not {config.attn_mask_type!r}; set attn_mask_type 'block_causal' or attn_type 'sdpa'"
        )
    return MaskSpec(documents=config.attn_mask_type == "block_causal")
