"""The torch modules of a deepseek_v3 model: YaRN rope, multi-head latent attention, the block.

Each class is the ``_owner_path`` target of the config of the same name in
``titan.models.deepseek_v3.model_config``. Module and parameter names are torchtitan v0.2.2's
(``wq`` or ``wq_a``/``q_norm``/``wq_b``, ``wkv_a``, ``kv_norm``, ``wkv_b``, ``wo``; ``moe`` on
MoE layers and ``feed_forward`` on dense ones), so checkpoints, TP plans and the Hugging Face
adapter address the same keys, and initialization is torchtitan's. Attention runs PyTorch SDPA:
causal, or with the batch's per-document boolean mask under ``attn_mask_type="block_causal"``
(the 16B, 236B and 671B flavors, which torchtitan runs with FlexAttention; see
``titan.models.common.attention_masks``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Shard

from titan.models.common.model import (
    BASE_INIT_STD,
    Decoder,
    RoPE,
    TransformerBlock,
    apply_rotary_emb,
    attention_mask_spec,
    block_init_std,
    masked_sdpa,
    norm_in_weight_dtype,
)
from titan.models.deepseek_v3 import model_config


class YaRNRoPE(RoPE):
    """Rotary table of the rope part of each head, YaRN-interpolated past the pretraining context.

    The interpolation (and the attention temperature, ``attention_scale``) applies only when the
    table is longer than ``original_seq_len``, as in torchtitan: training at the pretraining
    length or shorter uses plain rope frequencies.
    """

    Config = model_config.YaRNRoPE.Config

    def extends_context(self) -> bool:
        """Whether this table reaches past the pretraining context, turning YaRN on."""
        return self.max_seq_len > self.config.original_seq_len

    def inverse_frequencies(self) -> torch.Tensor:
        """The rotation frequencies, blended towards ``1 / rope_factor`` in the low bands."""
        freqs = super().inverse_frequencies()
        if not self.extends_context():
            return freqs
        low, high = yarn_correction_range(self.config, head_dim=self.head_dim)
        # 1 in the fast bands (kept as they are), 0 in the slow ones (fully interpolated).
        keep = 1 - linear_ramp(self.head_dim // 2, low=low, high=high)
        return freqs / self.config.rope_factor * (1 - keep) + freqs * keep

    def attention_scale(self) -> float:
        """Factor on the softmax scale: YaRN's temperature squared, or 1 without YaRN."""
        if not self.extends_context():
            return 1.0
        mscale = 0.1 * self.config.mscale * math.log(self.config.rope_factor) + 1.0
        return mscale * mscale


def yarn_correction_range(
    config: model_config.YaRNRoPE.Config, *, head_dim: int
) -> tuple[int, int]:
    """Frequency indices between which YaRN ramps from untouched to interpolated, clamped.

    Index ``d`` rotates ``original_seq_len / (2π · theta^(2d/head_dim))`` times over the
    pretraining context; the bounds are where that count equals ``beta_fast`` and ``beta_slow``.
    """

    def index_of(rotations: float) -> float:
        """The (fractional) frequency index that turns ``rotations`` times over the context."""
        turns = config.original_seq_len / (rotations * 2 * math.pi)
        return head_dim * math.log(turns) / (2 * math.log(config.theta))

    low = math.floor(index_of(config.beta_fast))
    high = math.ceil(index_of(config.beta_slow))
    return max(low, 0), min(high, head_dim - 1)


def linear_ramp(size: int, *, low: float, high: float) -> torch.Tensor:
    """``size`` float32 values rising linearly from 0 at index ``low`` to 1 at ``high``, clamped."""
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero; torchtitan widens it the same way
    ramp = (torch.arange(size, dtype=torch.float32) - low) / (high - low)
    return torch.clamp(ramp, 0, 1)


class MLAttention(nn.Module):
    """Multi-head latent attention: keys and values are expanded from one small shared latent.

    Each head's query and key are a part without rope (``qk_nope_head_dim``) and a rope part
    (``qk_rope_head_dim``); the key's rope part is one vector shared by all heads, projected
    straight from the input beside the latent. ``mask_spec`` is its mask kind (per document
    under ``block_causal``).
    """

    Config = model_config.MLAttention.Config

    def __init__(
        self,
        *,
        config: model_config.MLAttention.Config,
        dim: int,
        norm_eps: float,
        softmax_scale: float,
    ):
        super().__init__()
        self.mask_spec = attention_mask_spec(config)
        self.n_heads = config.n_heads
        self.q_lora_rank = config.q_lora_rank
        self.kv_lora_rank = config.kv_lora_rank
        self.qk_nope_head_dim = config.qk_nope_head_dim
        self.qk_rope_head_dim = config.qk_rope_head_dim
        self.qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
        self.v_head_dim = config.v_head_dim
        self.softmax_scale = softmax_scale
        query_width = self.n_heads * self.qk_head_dim
        if self.q_lora_rank == 0:
            self.wq = nn.Linear(dim, query_width, bias=False)
        else:
            self.wq_a = nn.Linear(dim, self.q_lora_rank, bias=False)
            self.q_norm = nn.RMSNorm(self.q_lora_rank, eps=norm_eps)
            self.wq_b = nn.Linear(self.q_lora_rank, query_width, bias=False)
        self.wkv_a = nn.Linear(dim, self.kv_lora_rank + self.qk_rope_head_dim, bias=False)
        self.kv_norm = nn.RMSNorm(self.kv_lora_rank, eps=norm_eps)
        self.wkv_b = nn.Linear(
            self.kv_lora_rank, self.n_heads * (self.qk_nope_head_dim + self.v_head_dim), bias=False
        )
        self.wo = nn.Linear(self.n_heads * self.v_head_dim, dim, bias=False)

    def init_weights(self, init_std: float) -> None:
        """Input projections at std 0.02, the output projection at ``init_std``, norms to ones."""
        inputs = [self.wkv_a, self.wkv_b]
        inputs += [self.wq] if self.q_lora_rank == 0 else [self.wq_a, self.wq_b]
        for linear in inputs:
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=BASE_INIT_STD)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)
        self.kv_norm.reset_parameters()
        if self.q_lora_rank != 0:
            self.q_norm.reset_parameters()

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
        q = (
            self.wq(x)
            if self.q_lora_rank == 0
            else self.wq_b(norm_in_weight_dtype(self.q_norm, self.wq_a(x)))
        )
        # -1 heads: as many as the projection holds (under tensor parallelism a DTensor's view).
        q = q.view(bs, seqlen, -1, self.qk_head_dim)
        q_nope, q_rope = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        latent, k_rope = torch.split(
            self.wkv_a(x), [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1
        )
        q_rope, k_rope = apply_rotary_emb(q_rope, k_rope.unsqueeze(2), freqs_cis)
        q = torch.cat([q_nope, q_rope], dim=-1)
        kv = self.wkv_b(norm_in_weight_dtype(self.kv_norm, latent)).view(
            bs, seqlen, -1, self.qk_nope_head_dim + self.v_head_dim
        )
        k_nope, v = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, -1, k_nope.shape[2], -1)], dim=-1)
        q, k, v = (local_heads(t).transpose(1, 2) for t in (q, k, v))
        out = masked_sdpa(q, k, v, attention_mask=attention_mask, scale=self.softmax_scale)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))


def local_heads(x: torch.Tensor) -> torch.Tensor:
    """This rank's heads of a ``[bs, seq, heads, d]`` query, key or value.

    Under tensor parallelism (``parallelize.py``) they are DTensors, sharded on the heads or
    replicated (the key's rope part is shared by all heads); SDPA runs on plain local heads.
    """
    if isinstance(x, DTensor):
        return x.redistribute(placements=[Shard(2)]).to_local()
    return x


class DeepSeekV3TransformerBlock(TransformerBlock):
    """Pre-norm block of MLA attention, then the dense SwiGLU (leading layers) or the MoE.

    ``init_weights`` and ``forward`` are the shared block's.
    """

    Config = model_config.DeepSeekV3TransformerBlock.Config

    def __init__(
        self,
        *,
        config: model_config.DeepSeekV3TransformerBlock.Config,
        layer_id: int,
        dim: int,
        n_layers: int,
        norm_eps: float,
        softmax_scale: float,
    ):
        # Not TransformerBlock.__init__: MLA needs the norm eps and the (YaRN-scaled) softmax
        # scale, and the submodules keep deepseek's registration order (attention, norms, then
        # the feed-forward), which orders the parameters, and so the gradient norm's sum.
        nn.Module.__init__(self)
        self.layer_id = layer_id
        self.attention = config.attention.build(
            dim=dim, norm_eps=norm_eps, softmax_scale=softmax_scale
        )
        self.attention_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.ffn_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.moe_enabled = config.uses_moe(layer_id)
        if self.moe_enabled:
            assert config.moe is not None  # uses_moe checked it
            self.moe = config.moe.build(dim=dim, hidden_dim=config.moe_hidden_dim(dim))
        elif config.feed_forward is None:
            raise ValueError(f"layer {layer_id} is dense but the block has no feed_forward")
        else:
            self.feed_forward = config.feed_forward.build(dim=dim)
        self.weight_init_std = block_init_std(config.init_std, layer_id=layer_id, n_layers=n_layers)


class DeepSeekV3Model(Decoder):
    """DeepSeek V2/V3 decoder: MLA attention, YaRN rope, dense then shared-plus-routed MoE layers.

    Build on the meta device, ``to_empty(device=...)``, then ``init_weights()``, as every titan
    decoder. The final norm keeps RMSNorm's default eps (torchtitan's deepseek_v3 does not pass
    ``norm_eps`` to it), so losses match torchtitan's bit for bit.
    """

    Config = model_config.DeepSeekV3Model.Config

    def __init__(self, *, config: model_config.DeepSeekV3Model.Config):
        nn.Module.__init__(self)
        self.config = config
        attention = config.layer.attention
        if not isinstance(attention, model_config.MLAttention.Config):
            raise ValueError("a deepseek_v3 block has multi-head latent attention (MLAttention)")
        self.rope = config.rope.build(
            head_dim=attention.qk_rope_head_dim, max_seq_len=config.max_seq_len
        )
        softmax_scale = (attention.qk_nope_head_dim + attention.qk_rope_head_dim) ** -0.5
        softmax_scale *= self.rope.attention_scale()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.register_buffer("freqs_cis", self.rope.freqs_cis(), persistent=False)
        self.layers = nn.ModuleDict()
        for layer_id in range(config.n_layers):
            self.layers[str(layer_id)] = config.layer.build(
                layer_id=layer_id,
                dim=config.dim,
                n_layers=config.n_layers,
                norm_eps=config.norm_eps,
                softmax_scale=softmax_scale,
            )
        # Each block's mask kind, in layer order, as the shared decoder keeps it.
        self.mask_specs = [layer.attention.mask_spec for layer in self.layers.values()]
        self.norm = nn.RMSNorm(config.dim)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)


__all__ = [
    "DeepSeekV3Model",
    "DeepSeekV3TransformerBlock",
    "MLAttention",
    "YaRNRoPE",
    "linear_ramp",
    "local_heads",
    "yarn_correction_range",
]
