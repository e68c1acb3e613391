"""The shared mixture of experts: routing math by hand, grouped GEMMs vs the loop, the module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from titan.components.loss import cross_entropy_loss
from titan.components.optimizer import OptimizersContainer
from titan.config.configs import ParallelismConfig
from titan.distributed.parallel_dims import ParallelDims
from titan.models import model_registry
from titan.models.common import Attention, FeedForward, MoE, TransformerBlock, moe_model
from titan.models.common.moe_balance import (
    expert_bias_delta,
    register_moe_load_balancing,
    update_expert_bias,
)
from titan.models.common.moe_model import GroupedExperts, TokenChoiceTopKRouter

DIM, HIDDEN = 16, 32


def router(**fields) -> TokenChoiceTopKRouter:
    """A 4-expert router over 2-wide tokens whose gate is the identity-like matrix below."""
    config = MoE.Config(**{"num_experts": 4, "top_k": 2, **fields})
    routing = TokenChoiceTopKRouter(config=config, dim=2)
    with torch.no_grad():
        # logits of a token (a, b): (a, b, a + b, -a)
        routing.gate.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]]))
    return routing


TOKENS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.5]])


def sorted_choice(selected: torch.Tensor, scores: torch.Tensor):
    """Experts and scores of each token in expert order (top-k here is unsorted)."""
    order = selected.argsort(dim=1)
    return selected.gather(1, order).tolist(), scores.gather(1, order)


def test_sigmoid_router_by_hand():
    scores, selected, counts = router(score_func="sigmoid")(TOKENS)
    experts, top = sorted_choice(selected, scores)
    # logits: (1, 0, 1, -1), (0, 2, 2, 0), (-1, 0.5, -0.5, 1)
    assert experts == [[0, 2], [1, 2], [1, 3]]
    expected = torch.sigmoid(torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.5, 1.0]]))
    torch.testing.assert_close(top, expected, rtol=0, atol=0)
    assert counts.tolist() == [1, 2, 2, 1]


def test_softmax_router_with_norm_and_scale_by_hand():
    scores, selected, _ = router(score_func="softmax", route_norm=True, route_scale=2.5)(TOKENS)
    experts, top = sorted_choice(selected, scores)
    assert experts == [[0, 2], [1, 2], [1, 3]]
    # Renormalised over the two chosen experts, softmax reduces to the chosen logits' softmax.
    logits = torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.5, 1.0]])
    torch.testing.assert_close(top, 2.5 * F.softmax(logits, dim=1))


def test_expert_bias_steers_the_choice_but_not_the_scores():
    bias = torch.tensor([0.0, 0.0, 0.0, 10.0])
    scores, selected, counts = router(score_func="sigmoid", top_k=1)(TOKENS, bias)
    assert selected.view(-1).tolist() == [3, 3, 3]
    expected = torch.sigmoid(torch.tensor([[-1.0], [0.0], [1.0]]))
    torch.testing.assert_close(scores, expected, rtol=0, atol=0)
    assert counts.tolist() == [0, 0, 0, 3]


def test_group_limited_routing_keeps_the_best_groups():
    # Groups {0, 1} and {2, 3}; a group scores the sum of its two best experts.
    routing = router(score_func="sigmoid", num_expert_groups=2, num_limited_groups=1, top_k=2)
    scores, selected, _ = routing(torch.tensor([[3.0, -2.0]]))
    # logits (3, -2, 1, -3): group 0 sums sigmoid(3) + sigmoid(-2) = 1.07 > group 1's 0.78,
    # so expert 2 (the second best overall) is masked out and the token gets 0 and 1.
    assert sorted(selected.view(-1).tolist()) == [0, 1]
    unlimited = router(score_func="sigmoid", top_k=2)(torch.tensor([[3.0, -2.0]]))[1]
    assert sorted(unlimited.view(-1).tolist()) == [0, 2]
    assert scores.shape == (1, 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_expert_groups": 2}, "num_limited_groups must be set"),
        ({"num_expert_groups": 3, "num_limited_groups": 1}, "not divisible"),
        ({"num_expert_groups": 4, "num_limited_groups": 1}, "at least 2 experts per group"),
        ({"num_expert_groups": 2, "num_limited_groups": 3}, r"between 1 and .*num_expert_groups"),
        ({"num_expert_groups": 2, "num_limited_groups": 0}, r"between 1 and .*num_expert_groups"),
        ({"num_expert_groups": 2, "num_limited_groups": 1, "top_k": 3}, "more than the 2 experts"),
    ],
)
def test_bad_expert_groups_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        router(**fields)


def test_force_load_balance_gives_every_expert_the_same_count():
    routing = router(force_load_balance=True, top_k=2)
    tokens = torch.randn(6, 2)
    scores, selected, counts = routing(tokens)
    assert counts.tolist() == [3, 3, 3, 3]
    assert selected.tolist() == [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1], [2, 3]]
    torch.testing.assert_close(scores, torch.sigmoid(routing.gate(tokens)).gather(1, selected))


def test_aligned_groups_by_hand():
    rows, offsets, destinations = moe_model.aligned_groups(torch.tensor([3, 0, 9]), 12)
    # Groups padded to 8, 8 (empty), 16 rows: ends 8, 16, 32; rows bounded by 12 + 3 * 8.
    assert rows == 36
    assert offsets.tolist() == [8, 16, 32] and offsets.dtype == torch.int32
    assert destinations.tolist() == [0, 1, 2] + list(range(16, 25))


def experts(*, use_grouped_mm: bool, num_experts: int = 4) -> GroupedExperts:
    """Experts with random weights (seed 0)."""
    module = GroupedExperts(
        dim=DIM, hidden_dim=HIDDEN, num_experts=num_experts, use_grouped_mm=use_grouped_mm
    )
    torch.manual_seed(0)
    module.init_weights(0.02)
    return module


def test_grouped_mm_matches_the_loop_in_value_and_gradient():
    grouped, loop = experts(use_grouped_mm=True), experts(use_grouped_mm=False)
    counts = torch.tensor([5, 0, 11, 3])
    x = torch.randn(19, DIM, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert moe_model.grouped_mm_usable(x, grouped.w1, grouped.w2)
    out_grouped, out_loop = grouped(x, counts), loop(x, counts)
    # Same products, summed in possibly different orders by the two kernels: float32 rounding
    # of a 16/32-term dot product (values ~1e-2) stays far below 1e-6.
    torch.testing.assert_close(out_grouped, out_loop, rtol=0, atol=1e-6)
    weights = torch.randn(19, DIM, generator=torch.Generator().manual_seed(2))
    grads_grouped = torch.autograd.grad((out_grouped * weights).sum(), [x, *grouped.parameters()])
    grads_loop = torch.autograd.grad((out_loop * weights).sum(), [x, *loop.parameters()])
    for a, b in zip(grads_grouped, grads_loop, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_unaligned_widths_fall_back_to_the_loop():
    module = GroupedExperts(dim=6, hidden_dim=10, num_experts=2, use_grouped_mm=True)
    torch.nn.init.normal_(module.w1)
    torch.nn.init.normal_(module.w2)
    torch.nn.init.normal_(module.w3)
    x = torch.randn(5, 6)
    assert not moe_model.grouped_mm_usable(x, module.w1, module.w2)
    counts = torch.tensor([2, 3])
    expected = moe_model.run_experts_loop(module.w1, module.w2, module.w3, x, counts)
    assert torch.equal(module(x, counts), expected)


def moe(**fields) -> torch.nn.Module:
    """A 4-expert top-2 MoE, built on meta and initialized on CPU under seed 0."""
    config = MoE.Config(**{"num_experts": 4, "top_k": 2, **fields})
    with torch.device("meta"):
        module = config.build(dim=DIM, hidden_dim=HIDDEN)
    module.to_empty(device="cpu")
    torch.manual_seed(0)
    module.init_weights(0.02)
    return module


def reference_moe(module, x: torch.Tensor) -> torch.Tensor:
    """The MoE token by token: each chosen expert's SwiGLU, scored, plus the shared ones."""
    tokens = x.reshape(-1, DIM)
    scores, selected, _ = module.router(tokens, module.expert_bias)
    out = torch.zeros_like(tokens)
    experts = module.experts
    for t in range(tokens.shape[0]):
        for slot in range(module.top_k):
            e, score = selected[t, slot], scores[t, slot]
            # score_before_experts scales the expert's input, which SwiGLU does not commute with.
            token = score * tokens[t] if module.score_before_experts else tokens[t]
            h = F.silu(experts.w1[e] @ token) * (experts.w3[e] @ token)
            out[t] += (
                experts.w2[e] @ h if module.score_before_experts else score * (experts.w2[e] @ h)
            )
        if module.shared_experts is not None:
            out[t] += module.shared_experts(tokens[t])
    return out.view_as(x)


@pytest.mark.parametrize("score_before_experts", [True, False])
@pytest.mark.parametrize("use_grouped_mm", [True, False])
def test_moe_matches_a_token_by_token_reference(score_before_experts, use_grouped_mm):
    module = moe(score_before_experts=score_before_experts, use_grouped_mm=use_grouped_mm)
    x = torch.randn(2, 5, DIM, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(module(x), reference_moe(module, x), rtol=1e-5, atol=1e-6)
    assert module.tokens_per_expert.sum().item() == 2 * 5 * 2


def test_moe_buffers_and_shared_experts():
    module = moe(num_shared_experts=2, load_balance_coeff=None)
    assert module.expert_bias is None
    assert module.shared_experts.w1.weight.shape == (2 * HIDDEN, DIM)
    assert set(module.state_dict()) == {
        "router.gate.weight",
        "experts.w1",
        "experts.w2",
        "experts.w3",
        "shared_experts.w1.weight",
        "shared_experts.w2.weight",
        "shared_experts.w3.weight",
    }
    balanced = moe(num_shared_experts=0)
    assert balanced.shared_experts is None
    assert (
        "expert_bias" in balanced.state_dict() and "tokens_per_expert" not in balanced.state_dict()
    )
    assert torch.equal(balanced.expert_bias, torch.zeros(4))


def test_moe_config_errors_are_clear():
    with pytest.raises(ValueError, match="load_balance_coeff must be positive"):
        MoE.Config(load_balance_coeff=0.0).build(dim=DIM, hidden_dim=HIDDEN)
    with pytest.raises(ValueError, match="top_k"):
        MoE.Config(num_experts=2, top_k=3).build(dim=DIM, hidden_dim=HIDDEN)


def test_parameter_count_matches_the_config():
    config = MoE.Config(num_experts=4, top_k=2, num_shared_experts=1, gate_bias=True)
    module = config.build(dim=DIM, hidden_dim=HIDDEN)
    assert sum(p.numel() for p in module.parameters()) == config.num_params(DIM, HIDDEN)


def built_from_garbage(**fields) -> torch.nn.Module:
    """A MoE built on meta, given memory by ``to_empty`` (NaN here, as garbage), then
    initialized under seed 0."""
    config = MoE.Config(**{"num_experts": 4, "top_k": 2, **fields})
    with torch.device("meta"):
        module = config.build(dim=DIM, hidden_dim=HIDDEN)
    module.to_empty(device="cpu")
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.fill_(float("nan"))
    torch.manual_seed(0)
    module.init_weights(0.02)
    return module


def test_init_weights_leaves_nothing_of_to_empty_memory_and_zeroes_the_gate_bias():
    first, second = built_from_garbage(gate_bias=True), built_from_garbage(gate_bias=True)
    assert torch.equal(first.router.gate.bias, torch.zeros(4))  # torchtitan 0.3.0's init
    again = dict(second.named_parameters()) | dict(second.named_buffers())
    for name, tensor in [*first.named_parameters(), *first.named_buffers()]:
        assert torch.isfinite(tensor).all(), name
        assert torch.equal(tensor, again[name]), name


def test_block_builds_moe_or_feed_forward():
    block = TransformerBlock.Config(
        attention=Attention.Config(n_heads=2),
        feed_forward=FeedForward.Config(hidden_dim=HIDDEN),
        moe=MoE.Config(num_experts=4, top_k=2, hidden_dim=8),
    )
    with torch.device("meta"):
        sparse = block.build(layer_id=0, dim=DIM, n_layers=2, norm_eps=1e-5)
        block.moe = None
        dense = block.build(layer_id=0, dim=DIM, n_layers=2, norm_eps=1e-5)
    assert sparse.moe_enabled and not hasattr(sparse, "feed_forward")
    assert sparse.moe.experts.w1.shape == (4, 8, DIM)
    assert not dense.moe_enabled and not hasattr(dense, "moe")


# ----------------------------------------------------------------------------- load balancing


def moe_part(*, num_layers: int = 2, **fields) -> torch.nn.Module:
    """A model part whose ``layers`` are MoE blocks over 4 experts (dim 16), initialized."""
    block = TransformerBlock.Config(
        attention=Attention.Config(n_heads=2),
        moe=MoE.Config(**{"num_experts": 4, "top_k": 1, "hidden_dim": 8, **fields}),
    )
    part = torch.nn.Module()
    part.layers = torch.nn.ModuleDict(
        {
            str(i): block.build(layer_id=i, dim=DIM, n_layers=num_layers, norm_eps=1e-5)
            for i in range(num_layers)
        }
    )
    for layer in part.layers.values():
        layer.init_weights()
    return part


def one_process_dims() -> ParallelDims:
    """The parallel degrees of a single process."""
    return ParallelDims.from_config(ParallelismConfig(), world_size=1)


def test_expert_bias_update_by_hand():
    part = moe_part(load_balance_coeff=0.25)
    first, second = (layer.moe for layer in part.layers.values())
    first.tokens_per_expert.copy_(torch.tensor([1.0, 1.0, 1.0, 5.0]))
    second.tokens_per_expert.copy_(torch.tensor([3.0, 1.0, 0.0, 4.0]))
    optimizers = OptimizersContainer.Config(lr=0.0).build(model_parts=[part])
    register_moe_load_balancing(
        optimizers, model_parts=[part], parallel_dims=one_process_dims(), world_mesh=None
    )
    optimizers.step()
    # Layer 0: mean 2, signs (+, +, +, -) * 0.25, minus their mean 0.125.
    assert first.expert_bias.tolist() == [0.125, 0.125, 0.125, -0.375]
    # Layer 1: mean 2, signs (-, +, +, -) already centred.
    assert second.expert_bias.tolist() == [-0.25, 0.25, 0.25, -0.25]
    assert first.tokens_per_expert.tolist() == second.tokens_per_expert.tolist() == [0.0] * 4
    optimizers.step()  # no tokens since: every sign is 0, the bias stays
    assert first.expert_bias.tolist() == [0.125, 0.125, 0.125, -0.375]


def test_balancing_is_a_no_op_without_coefficient():
    part = moe_part(load_balance_coeff=None)
    optimizers = OptimizersContainer.Config().build(model_parts=[part])
    register_moe_load_balancing(
        optimizers, model_parts=[part], parallel_dims=one_process_dims(), world_mesh=None
    )
    assert optimizers._step_post_hooks == []


def test_forward_counts_tokens_and_the_bias_steers_the_next_forward():
    part = moe_part(num_layers=1, load_balance_coeff=1.0)
    layer = part.layers["0"]
    x = torch.randn(2, 8, DIM, generator=torch.Generator().manual_seed(4))
    layer.moe(x)
    counts = layer.moe.tokens_per_expert.clone()
    assert counts.sum().item() == 16
    update_expert_bias([layer.moe], dp_mesh=None)
    assert torch.equal(layer.moe.expert_bias, expert_bias_delta(counts, 1.0))
    # A bias of +-1 dwarfs sigmoid score gaps (< 1): now only under-used experts are chosen.
    layer.moe(x)
    under_used = (counts < counts.mean()).nonzero().view(-1).tolist()
    assert set(layer.moe.tokens_per_expert.nonzero().view(-1).tolist()) <= set(under_used)


def debug_flavor_with_its_optimizers(family: str, flavor: str):
    """``flavor`` of ``family`` cut to two blocks of narrow experts (its routing and its
    ``load_balance_coeff`` kept), from seed 0 on CPU, and the optimizers titan-train builds for
    it: AdamW, then the family's post-optimizer hook if it names one."""
    spec = model_registry(family, flavor)
    config = spec.model
    config.n_layers = 2
    config.layer.moe.hidden_dim = 32
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    optimizers = OptimizersContainer.Config(lr=1e-2).build(model_parts=[model])
    if spec.post_optimizer_build_fn is not None:
        spec.resolve("post_optimizer_build_fn")(
            optimizers, model_parts=[model], parallel_dims=one_process_dims(), world_mesh=None
        )
    return model, optimizers


@pytest.mark.parametrize(
    ("family", "flavor", "balances"),
    [("qwen3", "debugmodel_moe", False), ("deepseek_v3", "debugmodel", True)],
)
def test_only_the_families_torchtitan_balances_move_the_expert_bias(family, flavor, balances):
    """torchtitan v0.2.2 moves the expert bias only where a family builds its optimizers with
    MoE load balancing (deepseek_v3, llama4, gpt_oss). qwen3 builds plain ones: its MoE flavors
    carry load_balance_coeff 1e-3 and so the persistent expert_bias buffer, but it stays zero and
    routes exactly as no bias would."""
    model, optimizers = debug_flavor_with_its_optimizers(family, flavor)
    moes = [block.moe for block in model.layers.values() if block.moe_enabled]
    assert moes and all(moe.load_balance_coeff == 1e-3 for moe in moes)
    assert any(key.endswith("moe.expert_bias") for key in model.state_dict())
    tokens = torch.randint(0, 2048, (2, 33), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        cross_entropy_loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
        optimizers.step()
        optimizers.zero_grad()
    assert [bool(moe.expert_bias.any()) for moe in moes] == [balances] * len(moes)
    if not balances:
        x = torch.randn(64, model.config.dim, generator=torch.Generator().manual_seed(1))
        for moe in moes:
            biased, unbiased = moe.router(x, moe.expert_bias), moe.router(x, None)
            assert all(torch.equal(a, b) for a, b in zip(biased, unbiased, strict=True))


@pytest.mark.slow  # starts two processes
def test_balancing_pools_the_counts_of_every_data_parallel_rank():
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [str(repo / "tests" / "dist_scripts" / "moe_balance_check.py")],
        capture_output=True,
        text=True,
        cwd=repo,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().endswith("OK")


def test_compiled_float32_moe_on_cpu_takes_the_loop_and_equals_eager():
    # torch.compile traces _grouped_mm with a fake-tensor rule that takes only bf16 (the CPU
    # kernel runs float32 eagerly), so compiled float32 experts fall back to the loop. aot_eager
    # traces as inductor does, without its code generation (minutes on two shared cores).
    module = moe(use_grouped_mm=True, num_shared_experts=1)
    x = torch.randn(2, 8, DIM, generator=torch.Generator().manual_seed(3))
    module(x).square().sum().backward()
    eager_grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    eager = module(x).detach()
    module.zero_grad(set_to_none=True)
    compiled = torch.compile(module, backend="aot_eager", fullgraph=False)
    out = compiled(x)
    out.square().sum().backward()
    # Same float32 ops in the same order (measured equal bit for bit); 1e-6 states the bound.
    torch.testing.assert_close(out, eager, rtol=0, atol=1e-6)
    for name, p in module.named_parameters():
        torch.testing.assert_close(p.grad, eager_grads[name], rtol=0, atol=1e-6, msg=name)
