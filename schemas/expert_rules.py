"""The expert-parallel and mixture-of-experts rules, shared by titan-validate (both config forms)
and the trainer: the layout EP can be formed on (``expert_layout_problem``, asked by the trainer's
``ParallelDims`` too), the experts each rank holds, and the routing each MoE can do (asked by the
model build, ``titan.models.common.moe_model``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from titan.schemas.diagnostics import Diagnostic
from titan.schemas.layout_rules import resolved_dp_shard
from titan.schemas.rule_facts import ConfigFacts
from titan.schemas.rule_helpers import diag, ints, largest_divisor


def expert_borrowed_degree(*, tp: int, cp: int, etp: int) -> int:
    """The degree EP always borrows whole: cp, times tp when the experts are not TP-sharded
    (etp = 1); the rest of EP comes out of dp_shard."""
    return cp * (tp if etp == 1 else 1)


def expert_layout_problem(
    *, ep: int, etp: int, tp: int, cp: int, dp_shard: int | None
) -> tuple[str, str, str] | None:
    """Why an expert-parallel layout (ep > 1) cannot be formed, as ``(fact, message, hint)`` where
    ``fact`` is "ep" or "etp"; None when it can. ``dp_shard`` is the resolved shard degree (None
    when unknown). The trainer's ``ParallelDims`` asks the same question before it builds a mesh.
    """
    if etp not in (1, tp):
        return (
            "etp",
            f"expert TP degree {etp} must be 1 or equal the TP degree {tp}",
            f"set expert_tensor_parallel_degree to 1 or {tp}",
        )
    borrowed = expert_borrowed_degree(tp=tp, cp=cp, etp=etp)
    if ep % borrowed:
        return (
            "ep",
            f"expert parallel degree {ep} must be a multiple of {borrowed} (cp{' × tp' if etp == 1 else ''})",
            f"use a multiple of {borrowed}, e.g. {max(borrowed, ep // borrowed * borrowed)}",
        )
    if dp_shard is not None and (dp_shard * borrowed) % ep:
        return (
            "ep",
            f"expert parallel degree {ep} must divide dp_shard × {'cp × tp' if etp == 1 else 'cp'} = {dp_shard * borrowed}",
            f"use a divisor of {dp_shard * borrowed} that is a multiple of {borrowed}, e.g. "
            f"{largest_divisor(dp_shard * borrowed, at_most=ep, multiple_of=borrowed)}",
        )
    return None


def experts_per_rank_problem(
    *, ep: int, num_experts: int, fits: Callable[[int], bool] = lambda degree: True
) -> tuple[str, str] | None:
    """Why ``ep`` ranks cannot share ``num_experts`` routed experts, as ``(message, hint)``; None
    when each rank holds the same number of whole experts. The degree the hint suggests is one
    that ``fits`` the rest of the layout too (else 1: no expert parallel). The trainer's
    expert-parallel split asks the same question."""
    if num_experts < 1 or num_experts % ep == 0:
        return None
    fitting = largest_divisor(num_experts, at_most=ep, fits=fits)
    return (
        f"expert parallel degree {ep} does not divide the {num_experts} routed experts: each "
        "expert-parallel rank holds the same number of whole experts",
        f"use an expert parallel degree that divides {num_experts}, e.g. {fitting}",
    )


def moe_routing_problem(
    *, num_experts: int, top_k: int, num_expert_groups: int | None, num_limited_groups: int | None
) -> tuple[str, str, str] | None:
    """Why a mixture of experts cannot route its tokens, as ``(field, message, hint)`` where
    ``field`` is the MoE config field to change; None when it can. The model build asks the same
    question (``titan.models.common.moe_model``): beyond these, ``torch.topk`` fails at the
    first forward or picks experts masked out of a token's groups."""
    experts = num_experts
    if experts < 1:
        return ("num_experts", f"num_experts is {experts}; it must be ≥ 1", "must be ≥ 1")
    if not 1 <= top_k <= experts:
        return (
            "top_k",
            f"top_k {top_k} must be between 1 and num_experts {experts}",
            f"route each token to 1 to {experts} experts",
        )
    groups, limited = num_expert_groups, num_limited_groups
    if groups is None:
        return None
    if groups < 1:
        return (
            "num_expert_groups",
            f"num_expert_groups is {groups}; it must be ≥ 1",
            "must be ≥ 1",
        )
    if limited is None:
        return (
            "num_limited_groups",
            "num_limited_groups must be set when num_expert_groups is set",
            f"set num_limited_groups to 1 to {groups}, or num_expert_groups = None to route "
            "over all experts",
        )
    if experts % groups or experts // groups < 2:
        why = (
            f"num_experts {experts} is not divisible by num_expert_groups {groups}"
            if experts % groups
            else f"group-limited routing needs at least 2 experts per group, got "
            f"{experts // groups} (num_experts {experts} / num_expert_groups {groups})"
        )
        if experts < 2:
            hint = "group-limited routing needs 2 or more experts: set num_expert_groups = None"
        else:
            hint = (
                f"use a number of groups that divides {experts} into groups of 2 or more, e.g. "
                f"{largest_divisor(experts, at_most=min(groups, experts // 2))}"
            )
        return ("num_expert_groups", why, hint)
    per_group = experts // groups
    if not 1 <= limited <= groups:
        return (
            "num_limited_groups",
            f"num_limited_groups {limited} must be between 1 and num_expert_groups {groups}",
            f"let each token use 1 to {groups} groups",
        )
    if top_k > limited * per_group:
        return (
            "top_k",
            f"top_k {top_k} is more than the {limited * per_group} experts that "
            f"num_limited_groups {limited} groups of {per_group} hold",
            f"raise num_limited_groups to {-(-top_k // per_group)}, or lower top_k to "
            f"{limited * per_group}",
        )
    return None


def moe_routing(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Each mixture of experts can route: top_k in 1..num_experts, and group-limited routing
    (num_limited_groups in 1..num_expert_groups, groups of 2 or more experts that hold top_k)."""
    for routing in facts.experts:
        experts, top_k = routing.num_experts, routing.top_k
        groups, limited = routing.num_expert_groups, routing.num_limited_groups
        if not ints(experts, top_k) or experts.value < 1 or top_k.value < 1:
            continue  # a wrong type or a count below 1: the type and range checks say so
        if not all(s.value is None or ints(s) for s in (groups, limited)):
            continue
        if groups.value is not None and groups.value < 1:
            continue
        problem = moe_routing_problem(
            num_experts=experts.value,
            top_k=top_k.value,
            num_expert_groups=groups.value,
            num_limited_groups=limited.value,
        )
        if problem is not None:
            field, message, hint = problem
            yield diag("moe-routing", getattr(routing, field), message, hint)


def expert_parallel(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """EP needs an MoE model; expert TP is 1 or equal to TP; EP borrows from dp_shard × cp (× tp);
    EP divides every MoE's routed experts."""
    ep, etp, tp, cp = facts.ep, facts.etp, facts.tp, facts.cp
    # v0.2.2's ParallelDims checks expert degrees only when EP is on; bad cp/tp are reported
    # by parallel_degrees and the range check.
    if not ints(ep, etp, tp, cp) or ep.value <= 1 or tp.value < 1 or cp.value < 1:
        return
    if facts.moe is False:
        yield diag(
            "expert-parallel",
            ep,
            f"expert parallel degree {ep.value} on `{facts.model_name.value}` flavor "
            f"`{facts.flavor.value}`, which has no experts",
            "use a mixture-of-experts flavor, or set expert_parallel_degree = 1",
        )
    shard = resolved_dp_shard(facts)
    problem = expert_layout_problem(
        ep=ep.value, etp=etp.value, tp=tp.value, cp=cp.value, dp_shard=shard
    )
    if problem is not None:
        fact, message, hint = problem
        yield diag("expert-parallel", etp if fact == "etp" else ep, message, hint)
        return
    counts = {r.num_experts.value for r in facts.experts if ints(r.num_experts)}
    for experts in sorted(counts):
        uneven = experts_per_rank_problem(
            ep=ep.value,
            num_experts=experts,
            fits=lambda degree: (
                expert_layout_problem(
                    ep=degree, etp=etp.value, tp=tp.value, cp=cp.value, dp_shard=shard
                )
                is None
            ),
        )
        if uneven is not None:
            yield diag("expert-parallel", ep, *uneven)
            return
