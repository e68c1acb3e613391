"""The mixture-of-experts feed-forward shared by llama4, qwen3, deepseek_v3 and gpt_oss."""

from __future__ import annotations

import dataclasses
from typing import Literal

from titan.config.configurable import Configurable
from titan.protocols.module import Module
from titan.schemas.ranges import NON_NEGATIVE, POSITIVE


class MoE(Module):
    """Token-choice mixture of experts: a router sends each token to top_k SwiGLU experts."""

    # The routing defaults are torchtitan's MoEArgs defaults: a small, working router
    # (8 experts, top-1, one shared expert) that every family's flavors are written against.
    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Experts, router and load balancing of a mixture-of-experts feed-forward."""

        _owner_path = "titan.models.common.moe_model:MoE"
        # num_limited_groups has no range of its own: it lies in 1..num_expert_groups, a
        # cross-field rule (titan.schemas.expert_rules.moe_routing_problem).
        _ranges = {
            "hidden_dim": POSITIVE,
            "num_experts": POSITIVE,
            "num_shared_experts": NON_NEGATIVE,
            "top_k": POSITIVE,
            "num_expert_groups": POSITIVE,
        }

        hidden_dim: int | None = None
        """Hidden size of each expert; None lets the block derive it from its feed-forward."""
        num_experts: int = 8
        """Number of routed experts."""
        num_shared_experts: int = 1
        """Number of experts every token goes through besides the routed ones."""
        score_func: Literal["softmax", "sigmoid"] = "sigmoid"
        """How router logits become expert scores."""
        route_norm: bool = False
        """Whether the top_k scores of a token are renormalised to sum to one."""
        route_scale: float = 1.0
        """Factor applied to the routing scores."""
        gate_bias: bool = False
        """Whether the router's linear layer has a bias."""
        score_before_experts: bool = True
        """Whether tokens are scaled by their scores before (True) or after the experts run."""
        top_k: int = 1
        """Number of routed experts each token goes to."""
        num_expert_groups: int | None = None
        """Expert groups for node-limited routing; None routes over all experts."""
        num_limited_groups: int | None = None
        """How many expert groups a token may use under node-limited routing."""
        use_grouped_mm: bool = True
        """Run the experts with grouped GEMMs where torch can (CPU, or bf16 on SM90+), else a loop."""
        load_balance_coeff: float | None = 1e-3
        """Update rate of the auxiliary-loss-free expert bias; None disables it."""
        force_load_balance: bool = False
        """Debugging only: route tokens round-robin so every expert gets the same load."""

        def num_params(self, dim: int, hidden_dim: int) -> int:
            """Parameters of the router, routed and shared experts (experts without biases)."""
            router = dim * self.num_experts + (self.num_experts if self.gate_bias else 0)
            experts = 3 * dim * hidden_dim * (self.num_experts + self.num_shared_experts)
            return router + experts
