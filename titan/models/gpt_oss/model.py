"""The torch modules of a gpt_oss model (the ``_owner_path`` targets of ``model_config``).

gpt-oss differs from the llama-style decoder in four places, each a class here:

- ``GptOssRoPE``: rotary embedding with YaRN (NTK-by-parts) interpolation and its concentration
  factor ``0.1 * ln(rope_factor) + 1`` folded into the cos/sin table; heads rotate their two
  *halves* (Hugging Face's layout, which torchtitan's gpt_oss uses too).
- ``GptOssAttention``: biased projections, heads of ``head_dim`` whatever the model width, and a
  learned per-head sink: one extra logit in every softmax denominator that takes probability
  mass without contributing a value. Even layers attend over a sliding window, odd layers fully.
- ``GptOssGroupedExperts``: experts with a fused, *interleaved* gate/up projection ``mlp1``
  (gate in even rows, up in odd rows), biases, and a clamped SwiGLU
  ``(clamp(up) + 1) * g * sigmoid(1.702 * g)`` with ``g = clamp(gate, max=swiglu_limit)``.
- ``GptOssMoE``: the shared MoE with those experts.

torchtitan runs gpt_oss on FlexAttention only (``attn_type`` is ``"flex"`` in every flavor) and
rescales the kernel's output by ``sigmoid(lse - sink)``. titan keeps ``attn_type`` as the config
says and computes the same masks (causal, and causal within ``sliding_window_size`` tokens) as
boolean tensors (``titan.models.common.attention_masks``) and the same softmax with the sink
logit explicitly, so it runs on CPU without a Flex kernel. Under ``attn_mask_type =
"block_causal"`` every layer also stays within each document; torchtitan's v0.2.2 full-attention
layers drop causality there (they apply the document mask alone), which titan does not copy.

torchtitan also casts every block to bfloat16 at construction; titan keeps parameters in the
default dtype and leaves precision to the trainer's mixed-precision settings.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from titan.distributed.expert_parallel import with_grad_summed_over
from titan.models.common.attention_masks import MaskSpec
from titan.models.common.cp_attention import ContextParallelMask
from titan.models.common.model import Decoder, RoPE, block_init_std, repeat_kv
from titan.models.common.moe_model import (
    MoE,
    TokenChoiceTopKRouter,
    aligned_groups,
    grouped_mm_usable,
    local_tensor,
)
from titan.models.gpt_oss import model_config

# The sigmoid gain of gpt-oss's SwiGLU (``x * sigmoid(1.702 x)`` approximates GELU); torchtitan
# and Hugging Face both fix it, so it is not a config field.
SWIGLU_ALPHA = 1.702


class GptOssRoPE(RoPE):
    """Rotary table of gpt-oss: YaRN-interpolated frequencies, cos and sin scaled by the
    concentration factor, laid out as ``[max_seq_len, 2 * head_dim]`` (cos, then sin).

    ``GptOssModel.rotary_table`` makes the decoder keep this real table (torchtitan's
    ``rope_cache``) in its ``freqs_cis`` buffer; ``apply_rotary_emb`` below is its only reader.
    """

    Config = model_config.GptOssRoPE.Config

    def inverse_frequencies(self) -> torch.Tensor:
        """The ``head_dim // 2`` rotation frequencies, YaRN-blended when ``rope_factor > 1``."""
        config = self.config
        if config.rope_factor <= 1.0:
            return super().inverse_frequencies()
        exponents = torch.arange(0, self.head_dim, 2)[: self.head_dim // 2].float() / self.head_dim
        divisors = config.theta**exponents
        low, high = yarn_correction_range(config, head_dim=self.head_dim)
        ramp = (torch.arange(self.head_dim // 2, dtype=torch.float32) - low) / (high - low)
        # Bands below ``low`` rotate many times over the original context: keep them; bands
        # above ``high`` rotate less than ntk_alpha times: interpolate them by rope_factor.
        # Written as torchtitan and Hugging Face write it, so the tables agree to the last bit.
        keep = 1 - ramp.clamp(0, 1)
        interpolated = 1.0 / (config.rope_factor * divisors)
        return interpolated * (1 - keep) + (1.0 / divisors) * keep

    def concentration(self) -> float:
        """YaRN's attention concentration ``0.1 ln(rope_factor) + 1`` (1 without scaling)."""
        factor = self.config.rope_factor
        return 0.1 * math.log(factor) + 1.0 if factor > 1.0 else 1.0

    def rope_cache(self) -> torch.Tensor:
        """``[max_seq_len, 2 * head_dim]`` float32: cos then sin of every position's angles,
        both times the concentration (so attention logits scale by its square)."""
        freqs = self.inverse_frequencies()
        positions = torch.arange(self.max_seq_len, dtype=freqs.dtype, device=freqs.device)
        angles = torch.outer(positions, freqs).float()
        angles = torch.cat([angles, angles], dim=-1)
        mscale = self.concentration()
        return torch.cat([angles.cos() * mscale, angles.sin() * mscale], dim=-1)


def yarn_correction_range(
    config: model_config.GptOssRoPE.Config, *, head_dim: int
) -> tuple[float, float]:
    """The frequency-band indices ``(low, high)`` between which YaRN ramps from keeping to
    interpolating: where a band completes ``ntk_beta`` and ``ntk_alpha`` rotations over
    ``original_seq_len`` positions. Not rounded (Hugging Face's ``truncate=False``)."""
    half = head_dim / 2

    def band(rotations: float) -> float:
        return (
            half
            * math.log(config.original_seq_len / (rotations * 2 * math.pi))
            / math.log(config.theta)
        )

    low, high = band(config.ntk_beta), band(config.ntk_alpha)
    if not 0 < low < high < half - 1:
        raise ValueError(
            f"YaRN needs 0 < low < high < head_dim/2 - 1, got low {low:.3f}, high {high:.3f} "
            f"for head_dim {head_dim}; check original_seq_len, ntk_alpha, ntk_beta and theta"
        )
    return low, high


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dimension's two halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(
    xq: torch.Tensor, xk: torch.Tensor, rope_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``[bs, seq, heads, head_dim]`` queries and keys by the first ``seq`` rows of
    ``rope_cache`` (``GptOssRoPE.rope_cache``), in the queries' dtype as torchtitan does."""
    seqlen, head_dim = xq.shape[1], xq.shape[-1]
    rows = rope_cache[:seqlen].view(1, seqlen, 1, 2 * head_dim)
    cos = rows[..., :head_dim].to(dtype=xq.dtype)
    sin = rows[..., head_dim:].to(dtype=xq.dtype)
    xq_out = xq * cos + rotate_half(xq) * sin
    xk_out = xk * cos + rotate_half(xk) * sin
    return xq_out.type_as(xq), xk_out.type_as(xk)


def sink_attention(
    xq: torch.Tensor, xk: torch.Tensor, xv: torch.Tensor, *, sinks: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Softmax attention of ``[bs, heads, seq, head_dim]`` tensors (keys and values already
    repeated to the query heads) whose denominator also holds ``exp(sinks[h])``.

    Logits and softmax are float32 whatever the inputs (as Flex accumulates); torchtitan's
    ``out * sigmoid(lse - sink)`` is this same quantity written after the fact.
    """
    scale = xq.shape[-1] ** -0.5
    logits = torch.matmul(xq.float(), xk.float().transpose(-2, -1)) * scale
    logits = logits.masked_fill(~mask, float("-inf"))
    sink = sinks.float().view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
    probs = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
    return torch.matmul(probs.to(xv.dtype), xv)


class GptOssAttention(nn.Module):
    """Grouped-query attention with biased projections, per-head sinks and an optional window.

    ``mask_spec`` is its mask kind: the window on sliding layers, per document under
    ``block_causal``.
    """

    Config = model_config.GptOssAttention.Config

    def __init__(
        self, *, config: model_config.GptOssAttention.Config, dim: int, sliding_window: bool
    ):
        super().__init__()
        n_kv_heads = config.kv_heads()
        if config.n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads {config.n_heads} is not divisible by n_kv_heads {n_kv_heads}"
            )
        self.head_dim = config.head_dim
        self.n_rep = config.n_heads // n_kv_heads
        self.window = config.sliding_window_size if sliding_window else None
        self.mask_spec = MaskSpec(
            documents=config.attn_mask_type == "block_causal", window=self.window
        )
        self.wq = nn.Linear(dim, config.n_heads * self.head_dim, bias=True)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=True)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=True)
        self.wo = nn.Linear(config.n_heads * self.head_dim, dim, bias=True)
        self.sinks = nn.Parameter(torch.empty(config.n_heads))

    def init_weights(self, init_std: float) -> None:
        """Every weight, bias and the sinks at the block's ``init_std`` (torchtitan's gpt_oss)."""
        nn.init.trunc_normal_(self.sinks, mean=0.0, std=init_std)
        for linear in (self.wq, self.wk, self.wv, self.wo):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)
            nn.init.trunc_normal_(linear.bias, mean=0.0, std=init_std)

    def forward(
        self,
        x: torch.Tensor,
        rope_cache: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend over ``x`` ``[bs, seq, dim]`` where the boolean ``attention_mask`` of this
        layer's kind allows (None: its kind is plain causal for this sequence length)."""
        bs, seqlen, _ = x.shape
        # -1, not n_heads: under tensor parallelism each rank holds only its local heads.
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, rope_cache)
        mask = attention_mask
        if isinstance(mask, ContextParallelMask):
            # Context parallel: every CP rank's keys and values, gathered before the heads are
            # repeated; the mask is this rank's queries over them.
            xk, xv = (
                t.transpose(1, 2) for t in mask.gather(xk.transpose(1, 2), xv.transpose(1, 2))
            )
            mask = mask.mask
        keys = repeat_kv(xk, self.n_rep).transpose(1, 2)
        values = repeat_kv(xv, self.n_rep).transpose(1, 2)
        if mask is None:
            mask = MaskSpec().build(seqlen=seqlen, device=x.device)
        # Under tensor parallelism the sinks are sharded by head like wq's rows: the local ones.
        sinks = local_tensor(self.sinks)
        out = sink_attention(xq.transpose(1, 2), keys, values, sinks=sinks, mask=mask)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))


def clamped_swiglu(h: torch.Tensor, *, limit: float) -> torch.Tensor:
    """gpt-oss's activation of the interleaved ``mlp1`` output ``h`` (gate even, up odd columns):
    ``(clamp(up, -limit, limit) + 1) * g * sigmoid(1.702 g)``, ``g = clamp(gate, max=limit)``."""
    gate = h[..., ::2].clamp(max=limit)
    up = h[..., 1::2].clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(SWIGLU_ALPHA * gate) * (up + 1)


class GptOssGroupedExperts(nn.Module):
    """``num_experts`` biased clamped-SwiGLU experts, stored as torchtitan's stacked tensors:
    ``mlp1_weight[E, 2*hidden, dim]`` (gate/up rows interleaved), ``mlp1_bias[E, 2*hidden]``,
    ``mlp2_weight[E, dim, hidden]``, ``mlp2_bias[E, dim]``.

    With ``use_grouped_mm`` and operands ``torch._grouped_mm`` accepts, all experts run in two
    grouped GEMMs; otherwise one loop over the experts. Both compute in the model's dtype
    (torchtitan's grouped path for gpt_oss casts to bfloat16 whatever the model's dtype).
    """

    def __init__(
        self,
        *,
        dim: int,
        hidden_dim: int,
        num_experts: int,
        swiglu_limit: float,
        use_grouped_mm: bool,
    ):
        super().__init__()
        self.swiglu_limit = swiglu_limit
        self.use_grouped_mm = use_grouped_mm
        self.mlp1_weight = nn.Parameter(torch.empty(num_experts, 2 * hidden_dim, dim))
        self.mlp1_bias = nn.Parameter(torch.empty(num_experts, 2 * hidden_dim))
        self.mlp2_weight = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.mlp2_bias = nn.Parameter(torch.empty(num_experts, dim))

    def init_weights(self, init_std: float) -> None:
        """Every weight and bias at the block's ``init_std`` (torchtitan's gpt_oss)."""
        for param in (self.mlp1_weight, self.mlp1_bias, self.mlp2_weight, self.mlp2_bias):
            nn.init.trunc_normal_(param, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor, num_tokens_per_expert: torch.Tensor) -> torch.Tensor:
        """``[N, dim]`` outputs of ``x`` ``[N, dim]``, whose rows are grouped by expert in order
        with ``num_tokens_per_expert[e]`` rows for expert ``e``."""
        w1, b1, w2, b2 = (
            local_tensor(p)
            for p in (self.mlp1_weight, self.mlp1_bias, self.mlp2_weight, self.mlp2_bias)
        )
        mesh = hidden_split_mesh(self.mlp2_weight)
        if mesh is not None:
            # Tensor parallel: each rank holds a slice of every expert's hidden units, so its
            # output (and its gradient for x) is a partial sum over the ranks. The output bias
            # is replicated: each rank adds its 1/tp share, and the gradient of x is summed.
            # (Expert parallel's whole experts per rank compute whole outputs: nothing to sum.)
            x = with_grad_summed_over(x, mesh)
            b2 = ScaledInForward.apply(b2, 1.0 / mesh.size())
        # torch.compile traces _grouped_mm with a fake kernel that takes bfloat16 only.
        traceable = x.dtype == torch.bfloat16 or not torch.compiler.is_compiling()
        if self.use_grouped_mm and traceable and grouped_mm_usable(x, w1, w2):
            return self.run_grouped_mm(w1, b1, w2, b2, x, num_tokens_per_expert)
        counts = num_tokens_per_expert.tolist()
        outputs = []
        for expert, rows in enumerate(torch.split(x, counts, dim=0)):
            h = rows @ w1[expert].transpose(0, 1) + b1[expert]
            h = clamped_swiglu(h, limit=self.swiglu_limit)
            outputs.append(h @ w2[expert].transpose(0, 1) + b2[expert])
        return torch.cat(outputs, dim=0)

    def run_grouped_mm(
        self,
        w1: torch.Tensor,
        b1: torch.Tensor,
        w2: torch.Tensor,
        b2: torch.Tensor,
        x: torch.Tensor,
        num_tokens_per_expert: torch.Tensor,
    ) -> torch.Tensor:
        """All experts in two grouped GEMMs over the shared MoE's padded groups (no host sync);
        each padded row gets its expert's biases, and the padding rows are dropped at the end."""
        rows, offsets, destinations = aligned_groups(num_tokens_per_expert, x.shape[0])
        padded = x.new_zeros(rows, x.shape[-1]).index_copy(0, destinations, x)
        # The expert of each padded row. Rows past the last group belong to no expert: grouped
        # GEMMs leave them as whatever memory they got (NaN included), so they take a constant
        # zero bias (index E) that no gradient flows back from.
        expert = torch.searchsorted(offsets, torch.arange(rows, device=x.device), right=True)
        b1 = torch.cat([b1, b1.new_zeros(1, b1.shape[-1])])
        b2 = torch.cat([b2, b2.new_zeros(1, b2.shape[-1])])
        h = torch._grouped_mm(padded, w1.transpose(-2, -1), offs=offsets) + b1[expert]
        h = clamped_swiglu(h, limit=self.swiglu_limit)
        out = torch._grouped_mm(h, w2.transpose(-2, -1), offs=offsets) + b2[expert]
        return out.index_select(0, destinations)


def hidden_split_mesh(mlp2_weight: torch.Tensor) -> DeviceMesh | None:
    """The mesh over which tensor parallelism splits the experts' hidden units (a DTensor
    ``mlp2_weight`` sharded on its last, hidden, dimension), else ``None``: a plain tensor, or
    expert parallel's shards of the expert dimension."""
    if not isinstance(mlp2_weight, DTensor):
        return None
    hidden = mlp2_weight.ndim - 1
    if any(placement.is_shard(hidden) for placement in mlp2_weight.placements):
        return mlp2_weight.device_mesh
    return None


class ScaledInForward(torch.autograd.Function):
    """``tensor * factor`` forward, the gradient passed through unscaled (torchtitan's
    ``ScaleBiasForward``): tp ranks each add ``bias / tp`` to a partial sum, and each must see
    the bias's whole gradient."""

    @staticmethod
    def forward(ctx: object, tensor: torch.Tensor, factor: float) -> torch.Tensor:
        """``tensor * factor``."""
        return tensor * factor

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient unchanged (none for ``factor``)."""
        return grad, None


class GptOssRouter(TokenChoiceTopKRouter):
    """The shared router, whose scores' gradient can be summed over tensor-parallel ranks.

    When tensor parallelism splits the experts' hidden units, every TP rank routes the same
    (replicated) tokens with the same gate, but the gradient of the routing scores is partial on
    each rank (the expert outputs they weight are), so it is summed over the ranks before it
    reaches the gate. The TP plan says so by setting ``partial_score_grads_over`` to its mesh.
    """

    def __init__(self, *, config: model_config.GptOssMoE.Config, dim: int):
        super().__init__(config=config, dim=dim)
        self.partial_score_grads_over: DeviceMesh | None = None

    def forward(
        self, x: torch.Tensor, expert_bias: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The shared routing, its scores' gradient summed over ``partial_score_grads_over``."""
        top_scores, selected, counts = super().forward(x, expert_bias)
        if self.partial_score_grads_over is not None:
            top_scores = with_grad_summed_over(top_scores, self.partial_score_grads_over)
        return top_scores, selected, counts


class GptOssMoE(MoE):
    """The shared token-choice MoE with gpt-oss's biased, clamped-SwiGLU experts."""

    Config = model_config.GptOssMoE.Config

    def build_router(self, *, config: model_config.GptOssMoE.Config, dim: int) -> GptOssRouter:
        """The shared router, able to run with a tensor-parallel (replicated) gate."""
        return GptOssRouter(config=config, dim=dim)

    def build_experts(
        self, *, config: model_config.GptOssMoE.Config, dim: int, hidden_dim: int
    ) -> GptOssGroupedExperts:
        """gpt-oss experts instead of the shared SwiGLU ones."""
        return GptOssGroupedExperts(
            dim=dim,
            hidden_dim=hidden_dim,
            num_experts=config.num_experts,
            swiglu_limit=config.swiglu_limit,
            use_grouped_mm=config.use_grouped_mm,
        )

    def init_weights(
        self, init_std: float, buffer_device: torch.device | str | None = None
    ) -> None:
        """The shared MoE's init, plus the router's bias at ``init_std``.

        torchtitan v0.2.2 never initializes the gate bias, so after ``to_empty`` it holds
        whatever memory it got (runs differ from one another); titan draws it like every other
        gpt-oss bias, from the same truncated normal.
        """
        super().init_weights(init_std, buffer_device)
        if self.router.gate.bias is not None:
            nn.init.trunc_normal_(self.router.gate.bias, mean=0.0, std=init_std)


class GptOssTransformerBlock(nn.Module):
    """Pre-norm block: ``h = x + attention(norm(x))``, ``out = h + moe(norm(h))``."""

    Config = model_config.GptOssTransformerBlock.Config

    def __init__(
        self,
        *,
        config: model_config.GptOssTransformerBlock.Config,
        layer_id: int,
        dim: int,
        n_layers: int,
        norm_eps: float,
    ):
        super().__init__()
        if config.moe is None:
            raise ValueError("a gpt_oss block needs its moe config (every layer is an MoE layer)")
        self.layer_id = layer_id
        self.attention = config.attention.build(
            dim=dim, sliding_window=config.uses_sliding_window(layer_id)
        )
        self.moe = config.moe.build(dim=dim, hidden_dim=config.moe_hidden_dim(dim))
        self.moe_enabled = True
        self.attention_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.ffn_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.weight_init_std = block_init_std(config.init_std, layer_id=layer_id, n_layers=n_layers)

    def init_weights(self, buffer_device: torch.device | str | None = None) -> None:
        """Reset both norms to ones and initialize attention and MoE at the block's std."""
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.moe.init_weights(self.weight_init_std, buffer_device=buffer_device)

    def forward(
        self,
        x: torch.Tensor,
        rope_cache: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the block over ``x`` of shape ``[bs, seq, dim]`` (``attention_mask``: this
        batch's mask for its attention, None for plain causal)."""
        h = x + self.attention(self.attention_norm(x), rope_cache, attention_mask=attention_mask)
        return h + self.moe(self.ffn_norm(h))


class GptOssModel(Decoder):
    """gpt-oss: the shared decoder over gpt-oss blocks and the YaRN rotary table.

    Build on the meta device, ``to_empty(device=...)``, then ``init_weights()``; the router's
    gate is initialized by the shared MoE at the block's std, embeddings and output as llama3's.
    """

    Config = model_config.GptOssModel.Config

    def rotary_table(self) -> torch.Tensor:
        """gpt-oss's real cos/sin table instead of the complex ``freqs_cis``."""
        return self.rope.rope_cache()


__all__ = [
    "GptOssAttention",
    "GptOssGroupedExperts",
    "GptOssModel",
    "GptOssMoE",
    "GptOssRoPE",
    "GptOssRouter",
    "GptOssTransformerBlock",
    "ScaledInForward",
    "apply_rotary_emb",
    "clamped_swiglu",
    "sink_attention",
    "yarn_correction_range",
]
