"""The torch modules of the mixture-of-experts feed-forward: router, grouped experts, MoE.

``MoE`` is the ``_owner_path`` target of ``titan.models.common.moe.MoE.Config``. Module, parameter
and buffer names are torchtitan's (``router.gate``, ``experts.w1/w2/w3``, ``shared_experts``,
``expert_bias``, ``tokens_per_expert``), so checkpoints, parallelization plans and the Hugging
Face adapters address the same keys. Routing math and initialization follow torchtitan v0.2.2.

One token's path through ``MoE.forward``::

    x[T, dim] -> router -> top_k experts per token -> tokens sorted by expert
              -> GroupedExperts (one SwiGLU per expert) -> unsorted, weighted, summed
              (+ shared experts, which every token goes through)
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from titan.models.common import feed_forward as feed_forward_config
from titan.models.common import moe as moe_config
from titan.models.common.model import FeedForward
from titan.models.common.weight_init import BASE_INIT_STD
from titan.schemas.expert_rules import moe_routing_problem

# Each expert's group of rows is padded to a multiple of this before a grouped GEMM, the
# alignment torchtitan uses for bf16 (16 bytes); empty experts get one padded group too.
TOKEN_GROUP_ALIGNMENT = 8
# torch._grouped_mm needs every stride of its operands to be a multiple of 16 bytes.
GROUPED_MM_STRIDE_BYTES = 16
# The smallest CUDA compute capability torch._grouped_mm runs on.
GROUPED_MM_MIN_CUDA_CAPABILITY = (9, 0)


class TokenChoiceTopKRouter(nn.Module):
    """Token-choice top-k routing: each token picks the ``top_k`` experts with the best scores.

    The expert bias of load balancing only steers the choice; the returned scores come from the
    unbiased router scores. With expert groups, a token first keeps the ``num_limited_groups``
    groups whose two best experts score highest, then picks its experts inside them.
    """

    def __init__(self, *, config: moe_config.MoE.Config, dim: int):
        super().__init__()
        check_expert_groups(config)
        self.gate = nn.Linear(dim, config.num_experts, bias=config.gate_bias)
        self.num_experts = config.num_experts
        self.top_k = config.top_k
        self.score_func = config.score_func
        self.route_norm = config.route_norm
        self.route_scale = config.route_scale
        self.num_expert_groups = config.num_expert_groups
        self.num_limited_groups = config.num_limited_groups
        self.force_load_balance = config.force_load_balance

    def init_weights(self, init_std: float) -> None:
        """The gate's weight at the block's ``init_std``; its bias, if any, at zero.

        torchtitan v0.2.2 leaves the bias alone, so after a meta-device build and ``to_empty``
        it holds whatever memory it got; 0.3.0 zeroes it, and so does titan.
        """
        nn.init.trunc_normal_(self.gate.weight, mean=0.0, std=init_std)
        if self.gate.bias is not None:
            nn.init.zeros_(self.gate.bias)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, num_experts]`` float32 router scores of ``x[T, dim]``."""
        # float32 whatever the activations: low-precision softmax/sigmoid here destabilises
        # training (torchtitan does the same).
        logits = self.gate(x).float()
        if self.score_func == "sigmoid":
            return torch.sigmoid(logits)
        return F.softmax(logits, dim=1)

    def limit_to_groups(self, scores_for_choice: torch.Tensor) -> torch.Tensor:
        """Mask (to -inf) the experts outside each token's ``num_limited_groups`` best groups."""
        assert self.num_expert_groups is not None and self.num_limited_groups is not None
        grouped = scores_for_choice.view(-1, self.num_expert_groups, self.experts_per_group())
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        kept = torch.topk(group_scores, k=self.num_limited_groups, dim=-1, sorted=False).indices
        dropped = torch.ones_like(group_scores, dtype=torch.bool).scatter_(1, kept, False)
        masked = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf"))
        return masked.view(-1, self.num_experts)

    def experts_per_group(self) -> int:
        """How many experts one routing group holds."""
        assert self.num_expert_groups is not None
        return self.num_experts // self.num_expert_groups

    def forward(
        self, x: torch.Tensor, expert_bias: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Route ``x[T, dim]``: ``(top_scores[T, k], selected_experts[T, k], counts[E])``."""
        scores = self.scores(x)
        if self.force_load_balance:
            # Debug routing: token t's j-th choice is expert (t * top_k + j) mod E, so every
            # expert gets the same load whatever the scores.
            picks = torch.arange(x.shape[0] * self.top_k, device=x.device, dtype=torch.int64)
            selected = (picks % self.num_experts).view(-1, self.top_k)
        else:
            scores_for_choice = scores if expert_bias is None else scores + expert_bias
            if self.num_expert_groups is not None:
                scores_for_choice = self.limit_to_groups(scores_for_choice)
            selected = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False).indices
        top_scores = scores.gather(dim=1, index=selected)
        if self.route_norm:
            top_scores = top_scores / (top_scores.sum(dim=-1, keepdim=True) + 1e-20)
        top_scores = top_scores * self.route_scale
        counts = torch.bincount(selected.view(-1), minlength=self.num_experts)
        return top_scores, selected, counts


def check_expert_groups(config: moe_config.MoE.Config) -> None:
    """Raise ``ValueError`` for a routing setup the router cannot run, with the finding
    titan-validate reports (``titan.schemas.expert_rules.moe_routing_problem``)."""
    problem = moe_routing_problem(
        num_experts=config.num_experts,
        top_k=config.top_k,
        num_expert_groups=config.num_expert_groups,
        num_limited_groups=config.num_limited_groups,
    )
    if problem is not None:
        field, message, hint = problem
        raise ValueError(f"moe.{field}: {message}; hint: {hint}")


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor parameter (tensor-parallel experts), else ``t`` itself."""
    return t.to_local() if isinstance(t, DTensor) else t


class GroupedExperts(nn.Module):
    """``num_experts`` SwiGLU experts stored as 3-D weights, run over tokens sorted by expert.

    ``w1``/``w3`` are ``[E, hidden, dim]`` and ``w2`` is ``[E, dim, hidden]`` (torchtitan's
    layout). Under expert tensor parallel they are DTensors sharded on the hidden dimension
    (``HIDDEN_DIMS``), and each rank computes a partial sum from its local shards.
    """

    HIDDEN_DIMS: ClassVar[dict[str, int]] = {"w1": 1, "w2": 2, "w3": 1}
    """Each weight's hidden dimension, the one expert tensor parallel splits."""

    def __init__(self, *, dim: int, hidden_dim: int, num_experts: int, use_grouped_mm: bool):
        super().__init__()
        self.num_experts = num_experts
        self.use_grouped_mm = use_grouped_mm
        self.w1 = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        self.w2 = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.w3 = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))

    def init_weights(self, init_std: float) -> None:
        """w1 at std 0.02, w2 and w3 at the block's ``init_std`` (as the dense SwiGLU)."""
        nn.init.trunc_normal_(self.w1, mean=0.0, std=BASE_INIT_STD)
        for weight in (self.w2, self.w3):
            nn.init.trunc_normal_(weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor, num_tokens_per_expert: torch.Tensor) -> torch.Tensor:
        """Run ``x[N, dim]`` (rows grouped by expert, ``num_tokens_per_expert[E]`` each)."""
        w1, w2, w3 = (local_tensor(w) for w in (self.w1, self.w2, self.w3))
        if self.use_grouped_mm and grouped_mm_usable(x, w1, w2):
            return run_experts_grouped_mm(w1, w2, w3, x, num_tokens_per_expert)
        return run_experts_loop(w1, w2, w3, x, num_tokens_per_expert)


def grouped_mm_usable(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> bool:
    """Whether ``torch._grouped_mm`` can run these operands here (device, dtype, strides)."""
    if x.dtype != w1.dtype:
        return False
    # torch 2.13's fake-tensor rule for _grouped_mm (what torch.compile traces with) accepts only
    # bf16, although the CPU kernel itself runs float32: compiled, float32 takes the loop.
    if torch.compiler.is_compiling() and x.dtype != torch.bfloat16:
        return False
    if x.device.type == "cuda":
        if x.dtype != torch.bfloat16:
            return False
        if torch.cuda.get_device_capability(x.device) < GROUPED_MM_MIN_CUDA_CAPABILITY:
            return False
    elif x.device.type != "cpu":
        return False
    row_bytes = (w1.shape[-1] * x.element_size(), w2.shape[-1] * x.element_size())
    return all(nbytes % GROUPED_MM_STRIDE_BYTES == 0 for nbytes in row_bytes)


def run_experts_loop(
    w1: torch.Tensor,
    w2: torch.Tensor,
    w3: torch.Tensor,
    x: torch.Tensor,
    num_tokens_per_expert: torch.Tensor,
) -> torch.Tensor:
    """The experts one after another with plain matmuls (syncs the counts to the host)."""
    outputs = []
    splits = torch.split(x, num_tokens_per_expert.tolist(), dim=0)
    for expert, rows in enumerate(splits):
        h = F.silu(rows @ w1[expert].transpose(-2, -1)) * (rows @ w3[expert].transpose(-2, -1))
        outputs.append(h @ w2[expert].transpose(-2, -1))
    return torch.cat(outputs, dim=0)


def run_experts_grouped_mm(
    w1: torch.Tensor,
    w2: torch.Tensor,
    w3: torch.Tensor,
    x: torch.Tensor,
    num_tokens_per_expert: torch.Tensor,
) -> torch.Tensor:
    """All experts in three grouped GEMMs over groups padded to ``TOKEN_GROUP_ALIGNMENT`` rows.

    The padding is computed on the device with static shapes, so no host sync happens.
    """
    rows, group_offsets, destinations = aligned_groups(num_tokens_per_expert, x.shape[0])
    padded = x.new_zeros(rows, x.shape[-1]).index_copy(0, destinations, x)
    h = F.silu(torch._grouped_mm(padded, w1.transpose(-2, -1), offs=group_offsets))
    h = h * torch._grouped_mm(padded, w3.transpose(-2, -1), offs=group_offsets)
    out = torch._grouped_mm(h, w2.transpose(-2, -1), offs=group_offsets)
    return out.index_select(0, destinations)


def aligned_groups(
    num_tokens_per_expert: torch.Tensor, num_rows: int
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Padded layout of ``num_rows`` rows grouped by expert: ``(rows, offsets, destinations)``.

    ``rows`` bounds the padded length (static, so no sync); ``offsets[E]`` are the int32 end
    rows of each padded group; ``destinations[num_rows]`` is where each input row goes.
    """
    align = TOKEN_GROUP_ALIGNMENT
    counts = num_tokens_per_expert.to(torch.int64)
    num_experts = counts.shape[0]
    padded_counts = torch.clamp(((counts + align - 1) // align) * align, min=align)
    padded_ends = torch.cumsum(padded_counts, dim=0)
    starts = torch.cumsum(counts, dim=0) - counts
    expert_of_row = torch.repeat_interleave(
        torch.arange(num_experts, device=counts.device), counts, output_size=num_rows
    )
    row = torch.arange(num_rows, device=counts.device)
    padded_starts = padded_ends - padded_counts
    destinations = padded_starts[expert_of_row] + row - starts[expert_of_row]
    return num_rows + num_experts * align, padded_ends.to(torch.int32), destinations


class MoE(nn.Module):
    """Token-choice top-k mixture of SwiGLU experts, with optional shared experts.

    Buffers: ``expert_bias[E]`` (persistent; only with ``load_balance_coeff``) steers routing
    and is updated by ``titan.models.common.moe_balance`` before each optimizer step from
    ``tokens_per_expert[E]`` (not persistent), the tokens each expert got since the last step.
    """

    Config = moe_config.MoE.Config

    def __init__(self, *, config: moe_config.MoE.Config, dim: int, hidden_dim: int):
        super().__init__()
        if config.load_balance_coeff is not None and config.load_balance_coeff <= 0:
            raise ValueError(
                f"moe.load_balance_coeff must be positive or None, got {config.load_balance_coeff}"
            )
        check_expert_groups(config)  # a family's own router may not check
        self.num_experts = config.num_experts
        self.top_k = config.top_k
        self.score_before_experts = config.score_before_experts
        self.load_balance_coeff = config.load_balance_coeff
        self.router = self.build_router(config=config, dim=dim)
        self.experts = self.build_experts(config=config, dim=dim, hidden_dim=hidden_dim)
        self.shared_experts = self.build_shared_experts(
            config=config, dim=dim, hidden_dim=hidden_dim
        )
        self.expert_bias: torch.Tensor | None
        if config.load_balance_coeff is None:
            self.expert_bias = None
        else:
            self.register_buffer("expert_bias", self.zero_counts(), persistent=True)
        self.register_buffer("tokens_per_expert", self.zero_counts(), persistent=False)

    def build_router(self, *, config: moe_config.MoE.Config, dim: int) -> nn.Module:
        """The router; a family with another routing overrides this."""
        return TokenChoiceTopKRouter(config=config, dim=dim)

    def build_experts(
        self, *, config: moe_config.MoE.Config, dim: int, hidden_dim: int
    ) -> nn.Module:
        """The routed experts; a family with other experts (biases, activations) overrides this."""
        return GroupedExperts(
            dim=dim,
            hidden_dim=hidden_dim,
            num_experts=config.num_experts,
            use_grouped_mm=config.use_grouped_mm,
        )

    def build_shared_experts(
        self, *, config: moe_config.MoE.Config, dim: int, hidden_dim: int
    ) -> nn.Module | None:
        """One SwiGLU as wide as all shared experts together, or None without shared experts."""
        if config.num_shared_experts == 0:
            return None
        width = hidden_dim * config.num_shared_experts
        return FeedForward(config=feed_forward_config.FeedForward.Config(hidden_dim=width), dim=dim)

    def zero_counts(self) -> torch.Tensor:
        """A float32 zero per expert, on the current default device."""
        return torch.zeros(self.num_experts, dtype=torch.float32)

    def init_weights(
        self, init_std: float, buffer_device: torch.device | str | None = None
    ) -> None:
        """Initialize router and experts at ``init_std``; zero the bias and the token counts."""
        self.experts.init_weights(init_std)
        self.router.init_weights(init_std)
        if self.shared_experts is not None:
            self.shared_experts.init_weights(init_std)
        self.init_buffers(buffer_device)

    def init_buffers(self, buffer_device: torch.device | str | None = None) -> None:
        """Zero the expert bias and the token counts (``to_empty`` leaves them as garbage)."""
        with torch.device(buffer_device or self.tokens_per_expert.device):
            self.tokens_per_expert = self.zero_counts()
            if self.expert_bias is not None:
                self.expert_bias = self.zero_counts()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mix the experts over every position of ``x[bs, seq, dim]``."""
        bs, seqlen, dim = x.shape
        tokens = x.reshape(-1, dim)
        top_scores, selected, counts = self.router(tokens, self.expert_bias)
        with torch.no_grad():
            self.tokens_per_expert.add_(counts)
        # Stable sort: the rows of one expert keep token order, so both expert paths (and every
        # run) see the same rows in the same order.
        order = torch.argsort(selected.view(-1), stable=True)
        routed = tokens[order // self.top_k]
        if self.score_before_experts:
            sorted_scores = top_scores.view(-1)[order].reshape(-1, 1)
            routed = (routed.float() * sorted_scores).to(x.dtype)
        routed_out = self.experts(routed, counts)
        out = self.shared_experts(tokens) if self.shared_experts is not None else None
        unsorted = torch.zeros_like(routed_out).index_copy(0, order, routed_out)
        unsorted = unsorted.view(-1, self.top_k, dim)
        if self.score_before_experts:
            mixed = unsorted.sum(dim=1)
        else:
            weights = top_scores.reshape(-1, 1, self.top_k)
            mixed = torch.bmm(weights, unsorted.float()).squeeze(1).to(x.dtype)
        if out is not None:
            mixed = out + mixed
        return mixed.view(bs, seqlen, dim)


__all__ = [
    "GroupedExperts",
    "MoE",
    "TokenChoiceTopKRouter",
    "aligned_groups",
    "check_expert_groups",
    "grouped_mm_usable",
    "local_tensor",
    "run_experts_grouped_mm",
    "run_experts_loop",
]
