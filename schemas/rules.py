"""Cross-field rules, written once for both config forms.

Each rule is a named function over :class:`ConfigFacts`, a small neutral view of a config that both
sides can build: the TOML validator from a legacy document (paths like
``parallelism.tensor_parallel_degree``, with spans), the registry validator from a
``Trainer.Config`` (paths in its own words). A rule never knows which form it is looking at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from titan.schemas._frozen import Frozen, _set
from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.moved_keys import STALE_CONVERTER_NAMES  # re-exported: one table, read here
from titan.schemas.pipeline_rules import pipeline_layout_rule
from titan.schemas.ranges import is_int64
from titan.schemas.rule_facts import ConfigFacts, Setting

CONVERTER_NAMES = (
    "quantize.linear.float8",
    "quantize.grouped_mm.float8",
    "quantize.linear.mx",
    "quantize.grouped_mm.mx",
)
"""Converter names registered at v0.2.2; the last component is the quantization family."""


class StaleName(Frozen):
    """When an older torchtitan registered a converter name, and the tables of that time."""

    __slots__ = ("since", "until", "commits", "tables")
    __match_args__ = ("since", "until", "commits", "tables")

    since: str
    """The month it was first registered (``2025-02``)."""
    until: str
    """The month it was renamed (``2025-09``)."""
    commits: str
    """The commits that registered and renamed it."""
    tables: tuple[str, ...]
    """Old tables (``titan.schemas.moved_keys``) whose keys were in use while the name was
    registered: one of them in a file dates it to a run that had the converter."""

    def __init__(self, since: str, until: str, commits: str, tables: tuple[str, ...]) -> None:
        _set(self, "since", since)
        _set(self, "until", until)
        _set(self, "commits", commits)
        _set(self, "tables", tables)

    @property
    def months(self) -> str:
        """``2025-02 to 2025-09``."""
        return self.since if self.since == self.until else f"{self.since} to {self.until}"

    @property
    def era(self) -> str:
        """``registered by torchtitan from 2025-02 to 2025-09 (...)``."""
        return f"registered by torchtitan from {self.months} ({self.commits})"


_V01 = ("float8", "mx")
_DENSE = ("quantize.dense", "quantize.moe")
_RENAMED = "renamed in #1763, 8a2686c4"
STALE_NAME_ERAS: dict[str, StaleName] = {
    "float8": StaleName(
        "2025-02",
        "2025-09",
        'model.converters in #823, 57387af0; renamed "quantize.dense.float8" in #1701, 5b5d4685',
        _V01,
    ),
    "mx": StaleName("2025-05", "2025-09", 'renamed "quantize.dense.mx" in #1701, 5b5d4685', _V01),
    **{
        name: StaleName("2025-09", "2025-09", f"on main from #1701, 5b5d4685; {_RENAMED}", _DENSE)
        for name in (
            "quantize.dense.float8",
            "quantize.moe.float8",
            "quantize.dense.mx",
            "quantize.moe.mx",
        )
    },
}
"""The era of each stale converter name (``manager_behaviour.md`` §6, ``titan.schemas.moved_keys``)."""


def stale_name_dated(name: str, document: dict) -> str | None:
    """The old key that dates ``document`` to when ``name`` was a registered converter, if one
    does: a key of that era's tables that was still in use after the name was registered.
    Such a file's run had the converter; v0.2.2 only failed on it because the name changed."""
    import re

    from titan.schemas import eras

    stale = STALE_NAME_ERAS.get(name)
    if stale is None:
        return None
    for parts, _ in eras.leaves(document):
        rule = eras.rule_for(parts)
        if rule is None or rule.how == "converter":  # the switch model.converters replaced
            continue
        if not any(rule.old == t or rule.old.startswith(t + ".") for t in stale.tables):
            continue
        until = re.search(r" to (\d{4}-\d{2})", rule.era)
        if until is None or until.group(1) >= stale.since:
            return ".".join(parts)
    return None


def _diag(
    code: str, setting: Setting, message: str, hint: str | None = None, *, severity=Severity.ERROR
) -> Diagnostic:
    return Diagnostic(
        code=code,
        severity=severity,
        path=setting.path,
        message=message,
        hint=hint,
        span=setting.span,
    )


def _blame(*settings: Setting) -> Setting:
    """The first setting the user wrote, else the first one."""
    return next((s for s in settings if s.written), settings[0])


def _largest_divisor(n: int, *, at_most: int, multiple_of: int = 1) -> int:
    """The largest divisor of ``n`` not above ``at_most`` that is a multiple of ``multiple_of``
    (``multiple_of`` itself when there is none)."""
    return next(
        (d for d in range(min(n, at_most), 0, -1) if n % d == 0 and d % multiple_of == 0),
        multiple_of,
    )


def _degrees(facts: ConfigFacts) -> list[Setting]:
    return [facts.dp_replicate, facts.dp_shard, facts.tp, facts.pp, facts.cp]


def _ints(*settings: Setting) -> bool:
    return all(is_int64(s.value) for s in settings)


def parallel_degrees(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The FSDP shard degree is -1 (use what is left) or at least 1; the range check
    (``titan.schemas.ranges``) refuses the values below -1 and every other degree below 1."""
    shard = facts.dp_shard
    if _ints(shard) and shard.value == 0:
        yield _diag(
            "parallel-degree",
            shard,
            f"`{shard.path}` is 0; it must be -1 or at least 1",
            "-1 uses every GPU the other degrees leave",
        )


def _resolved_dp_shard(facts: ConfigFacts) -> int | None:
    """The FSDP shard degree, inferring -1 from the world size when that is known and exact."""
    if not _ints(*_degrees(facts)):
        return None
    shard = facts.dp_shard.value
    if shard != -1:
        return shard
    if facts.ngpu is None:
        return None
    others = facts.dp_replicate.value * facts.tp.value * facts.pp.value * facts.cp.value
    if others < 1 or facts.ngpu % others:
        return None
    return facts.ngpu // others


def _gpus(count: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def world_size(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The parallel degrees multiply to the number of GPUs (``--ngpu``)."""
    if facts.ngpu is None or not _ints(*_degrees(facts)):
        return
    if any(s.value < 1 and not (s is facts.dp_shard and s.value == -1) for s in _degrees(facts)):
        return  # reported by parallel_degrees and the range check
    named = [s for s in _degrees(facts) if s is not facts.dp_shard and s.value > 1]
    others = math.prod(s.value for s in named)
    shown = " × ".join(f"{s.path.rsplit('.', 1)[-1]}={s.value}" for s in named) or "1"
    if facts.dp_shard.value == -1:
        if facts.ngpu % others:
            worst = max(named, key=lambda s: s.value)
            yield _diag(
                "world-size",
                worst,
                f"{_gpus(facts.ngpu)} cannot be split by {shown}"
                f"{f' = {others}' if len(named) > 1 else ''}: "
                f"{facts.ngpu} is not divisible by {others}",
                f"choose degrees whose product divides {facts.ngpu}, or run on a multiple of "
                f"{_gpus(others)}",
            )
        return
    total = others * facts.dp_shard.value
    if total != facts.ngpu:
        yield _diag(
            "world-size",
            facts.dp_shard,
            f"the parallel degrees multiply to {total} ({shown} × dp_shard={facts.dp_shard.value}) "
            f"but --ngpu is {facts.ngpu}",
            "set data_parallel_shard_degree = -1 to use every remaining GPU",
        )


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
            f"{_largest_divisor(dp_shard * borrowed, at_most=ep, multiple_of=borrowed)}",
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
    fitting = _divisor_at_most(num_experts, ep, fits=fits)
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
                f"{_divisor_at_most(experts, min(groups, experts // 2))}"
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


def _divisor_at_most(
    n: int, at_most: int, *, fits: Callable[[int], bool] = lambda degree: True
) -> int:
    """The largest divisor of ``n`` not above ``at_most`` that ``fits``, looked for among the
    10,000 numbers below it (1 when none of them is: a hostile count may be near 2**63)."""
    top = min(n, at_most)
    return next((d for d in range(top, max(top - 10_000, 1), -1) if n % d == 0 and fits(d)), 1)


def moe_routing(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Each mixture of experts can route: top_k in 1..num_experts, and group-limited routing
    (num_limited_groups in 1..num_expert_groups, groups of 2 or more experts that hold top_k)."""
    for routing in facts.experts:
        experts, top_k = routing.num_experts, routing.top_k
        groups, limited = routing.num_expert_groups, routing.num_limited_groups
        if not _ints(experts, top_k) or experts.value < 1 or top_k.value < 1:
            continue  # a wrong type or a count below 1: the type and range checks say so
        if not all(s.value is None or _ints(s) for s in (groups, limited)):
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
            yield _diag("moe-routing", getattr(routing, field), message, hint)


def expert_parallel(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """EP needs an MoE model; expert TP is 1 or equal to TP; EP borrows from dp_shard × cp (× tp);
    EP divides every MoE's routed experts."""
    ep, etp, tp, cp = facts.ep, facts.etp, facts.tp, facts.cp
    # v0.2.2's ParallelDims checks expert degrees only when EP is on; bad cp/tp are reported
    # by parallel_degrees and the range check.
    if not _ints(ep, etp, tp, cp) or ep.value <= 1 or tp.value < 1 or cp.value < 1:
        return
    if facts.moe is False:
        yield _diag(
            "expert-parallel",
            ep,
            f"expert parallel degree {ep.value} on `{facts.model_name.value}` flavor "
            f"`{facts.flavor.value}`, which has no experts",
            "use a mixture-of-experts flavor, or set expert_parallel_degree = 1",
        )
    shard = _resolved_dp_shard(facts)
    problem = expert_layout_problem(
        ep=ep.value, etp=etp.value, tp=tp.value, cp=cp.value, dp_shard=shard
    )
    if problem is not None:
        fact, message, hint = problem
        yield _diag("expert-parallel", etp if fact == "etp" else ep, message, hint)
        return
    counts = {r.num_experts.value for r in facts.experts if _ints(r.num_experts)}
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
            yield _diag("expert-parallel", ep, *uneven)
            return


def global_batch(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """global_batch_size (when set) is a positive multiple of local_batch_size × data-parallel degree."""
    gbs, lbs = facts.global_batch_size, facts.local_batch_size
    if not _ints(gbs, lbs):
        return
    if lbs.value < 1:
        return  # refused by the range check
    if gbs.value < 0:
        return  # v0.2.2 treats any negative value as local batch size x DP degree
    if gbs.value == 0:
        yield _diag(
            "batch-size",
            gbs,
            f"global batch size {gbs.value} must be -1 or positive",
            "use -1 (local batch size × data-parallel degree), or a positive multiple of it",
        )
        return
    shard = _resolved_dp_shard(facts)
    dp = (
        facts.dp_replicate.value * shard
        if shard is not None and _ints(facts.dp_replicate)
        else None
    )
    unit, what = (
        (lbs.value * dp, f"local_batch_size × data-parallel degree = {lbs.value} × {dp}")
        if dp
        else (lbs.value, "local_batch_size")
    )
    if gbs.value % unit:
        yield _diag(
            "batch-size",
            gbs,
            f"global batch size {gbs.value} is not a multiple of {what} = {unit}",
            f"use a multiple of {unit}, e.g. {max(unit, gbs.value // unit * unit)}",
        )


def sequence_length(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """With TP or CP, seq_len is divisible by tp × 2·cp."""
    seq, tp, cp = facts.seq_len, facts.tp, facts.cp
    if not _ints(seq, tp, cp) or (tp.value <= 1 and cp.value <= 1) or tp.value < 1 or cp.value < 1:
        return
    unit = tp.value * 2 * cp.value
    if seq.value % unit:
        yield _diag(
            "seq-len",
            _blame(seq, tp, cp),
            f"sequence length {seq.value} is not divisible by tp × 2·cp = {unit}",
            f"use a sequence length divisible by {unit}, e.g. {max(unit, seq.value // unit * unit)}, "
            "or other tensor/context parallel degrees",
        )


def tensor_parallel_heads(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The TP degree divides the attention heads and the key/value heads."""
    tp = facts.tp
    if not _ints(tp) or tp.value <= 1:
        return
    for heads, kind in ((facts.n_heads, "attention heads"), (facts.n_kv_heads, "key/value heads")):
        if heads is not None and heads % tp.value:
            yield _diag(
                "tp-heads",
                tp,
                f"tensor parallel degree {tp.value} does not divide the {heads} {kind} of "
                f"`{facts.model_name.value}` flavor `{facts.flavor.value}`",
                f"use a tensor parallel degree that divides {heads}"
                f"{'' if facts.ngpu is None else f' and the {facts.ngpu} GPUs'}, e.g. "
                f"{_heads_tp_degree(facts, at_most=tp.value)}",
            )
            return


def _heads_tp_degree(facts: ConfigFacts, *, at_most: int) -> int:
    """The largest TP degree not above ``at_most`` that divides both head counts and, with
    ``--ngpu``, the GPU count (1 when none above it does)."""
    counts = [count for count in (facts.n_heads, facts.n_kv_heads, facts.ngpu) if count]
    # Bounded by the smallest count, not by ``at_most`` (a hostile degree may be 2**63).
    top = min([at_most, *counts])
    fitting = [d for d in range(1, top + 1) if all(count % d == 0 for count in counts)]
    return max(fitting, default=1)


def checkpoint_keep(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """keep_latest_k is 0 (keep all) or at least 2; torchtitan refuses 1 (negative values are
    refused by the range check)."""
    k = facts.keep_latest_k
    if _ints(k) and k.value == 1:
        yield _diag(
            "keep-latest-k",
            k,
            f"keep_latest_k = {k.value} is not allowed",
            "use 0 to keep every checkpoint, or 2 or more",
        )


def hf_model_only(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Hugging Face loads and saves carry model weights only."""
    if facts.initial_load_in_hf.value is True and facts.initial_load_model_only.value is False:
        yield _diag(
            "hf-model-only",
            facts.initial_load_in_hf,
            "an initial load in HF format restores the model only, but initial_load_model_only is false",
            "set initial_load_model_only = true, or load a DCP checkpoint instead",
        )
    if facts.last_save_in_hf.value is True and facts.last_save_model_only.value is False:
        yield _diag(
            "hf-model-only",
            facts.last_save_in_hf,
            "a last save in HF format holds the model only, but last_save_model_only is false",
            "set last_save_model_only = true, or keep the last save in DCP format",
        )
    if (
        facts.initial_load_in_hf_quantized.value is True
        and facts.initial_load_in_hf.value is not True
    ):
        yield _diag(
            "hf-model-only",
            facts.initial_load_in_hf_quantized,
            "a quantized HF initial load needs initial_load_in_hf",
            "set initial_load_in_hf = true too, or turn initial_load_in_hf_quantized off",
        )


def converters(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Converter names are registered ones, of one quantization family, and their tables are used."""
    if not isinstance(facts.converters.value, list):
        return  # wrong type: reported by the schema check
    from titan.schemas.fork_names import NO_FORK

    names, fork = facts.converters.value, facts.fork or NO_FORK
    valid = [n for n in names if n in CONVERTER_NAMES]
    for name in names:
        if not isinstance(name, str) or name in CONVERTER_NAMES or name in fork.converter_names():
            continue
        yield _diag(
            "unknown-converter",
            facts.converters,
            f'converter `"{name}"` is not registered; the trainer would fail with KeyError',
            fork.converter_hint(
                name, _converter_hint(name, names), stale=name in STALE_CONVERTER_NAMES
            ),
        )
    families = {n.rsplit(".", 1)[-1] for n in valid}
    if len(families) > 1:
        keep = " or ".join(
            f"`converters = {_names([n for n in valid if n.endswith('.' + family)])}`"
            for family in sorted(families)
        )
        yield _diag(
            "converter-families",
            facts.converters,
            "float8 and mx converters cannot be combined",
            f"keep the converters of one quantization family: {keep}",
        )
    for table in facts.quantize_tables:
        if table.value not in names:
            listed = [STALE_CONVERTER_NAMES.get(n, n) for n in names if isinstance(n, str)]
            enabled = _names([n for n in listed if n in CONVERTER_NAMES] + [table.value])
            hint = f"enable it with `model.converters = {enabled}`, or delete the table"
            if table.value in listed:
                hint = f"`model.converters` names it by an old name: set `model.converters = {enabled}`"
            yield _diag(
                "inert-section",
                table,
                f"`[{table.path}]` has no effect: converter `{table.value}` is not in model.converters",
                hint,
                severity=Severity.WARNING,
            )


def _names(names: list[str]) -> str:
    """A list of converter names as TOML writes it, each once."""
    return "[" + ", ".join(f'"{n}"' for n in dict.fromkeys(names)) + "]"


def _converter_hint(name: str, names: list) -> str:
    """For an unregistered converter name: the list to write, when one would be accepted."""
    if name in STALE_CONVERTER_NAMES:
        new = STALE_CONVERTER_NAMES[name]
        why = f'"{name}" was {STALE_NAME_ERAS[name].era}; v0.2.2 registers "{new}"'
        fixed = [STALE_CONVERTER_NAMES.get(n, n) for n in names if isinstance(n, str)]
        families = {n.rsplit(".", 1)[-1] for n in fixed}
        if all(n in CONVERTER_NAMES for n in fixed) and len(families) == 1:
            return f"use `converters = {_names(fixed)}`: {why} (titan-validate --fix rewrites it)"
        return why
    from titan.schemas.misspelling import closest_one  # a misspelling only: not `float8_qat`

    meant = closest_one(name, CONVERTER_NAMES)
    if meant is not None:
        return f'did you mean `"{meant}"`?'
    return "registered converters: " + ", ".join(f'"{n}"' for n in CONVERTER_NAMES)


def float8_options(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """A float8 recipe cannot be combined with the float8 FSDP all-gather."""
    names = facts.converters.value if isinstance(facts.converters.value, list) else []
    if "quantize.linear.float8" not in names:
        return
    if (
        facts.float8_recipe.value in ("rowwise", "rowwise_with_gw_hp")
        and facts.float8_all_gather.value is True
    ):
        yield _diag(
            "float8-options",
            facts.float8_recipe,
            f"recipe `{facts.float8_recipe.value}` does not support enable_fsdp_float8_all_gather (tensorwise only)",
            'use recipe "tensorwise", or turn enable_fsdp_float8_all_gather off',
        )
    if facts.float8_precompute.value is True and facts.float8_all_gather.value is not True:
        yield _diag(
            "float8-options",
            facts.float8_precompute,
            "precompute_float8_dynamic_scale_for_fsdp has no effect without enable_fsdp_float8_all_gather",
            "turn enable_fsdp_float8_all_gather on, or precompute_float8_dynamic_scale_for_fsdp off",
            severity=Severity.WARNING,
        )


def optimizer_in_backward(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Stepping the optimizer inside backward does not work with EP, PP or fault tolerance."""
    if facts.early_step_in_backward.value is not True:
        return
    for setting, what in ((facts.ep, "expert parallel"), (facts.pp, "pipeline parallel")):
        if _ints(setting) and setting.value > 1:
            yield _diag(
                "optimizer-in-backward",
                facts.early_step_in_backward,
                f"early_step_in_backward is not supported with {what} (degree {setting.value})",
                f"turn early_step_in_backward off, or run without {what}",
            )
    if facts.fault_tolerance.value is True:
        yield _diag(
            "optimizer-in-backward",
            facts.early_step_in_backward,
            "early_step_in_backward is not supported with fault tolerance",
            "turn early_step_in_backward off, or run without fault tolerance",
        )


def activation_checkpointing(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The selective option is "op" or a positive integer; memory_budget mode needs compile."""
    mode, option = facts.ac_mode.value, facts.selective_ac_option.value
    if (
        mode == "selective"
        and isinstance(option, str)
        and option != "op"
        and not (option.isascii() and option.isdigit() and int(option) > 0)
    ):
        yield _diag(
            "activation-checkpoint",
            facts.selective_ac_option,
            f'selective_ac_option "{option}" must be "op" or a positive integer such as "2"',
            'use "op" (a per-op policy) or "N" to checkpoint every N-th layer',
        )
    if mode == "memory_budget" and facts.compile_enable.value is not True:
        yield _diag(
            "activation-checkpoint",
            facts.ac_mode,
            "memory_budget activation checkpointing needs compile.enable = true",
            'enable compile, or use activation checkpointing mode "selective" or "full"',
        )


def async_tensor_parallel(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Async TP needs torch.compile (checked only when TP is on, as v0.2.2 does)."""
    tp_on = _ints(facts.tp) and facts.tp.value > 1
    if tp_on and facts.async_tp.value is True and facts.compile_enable.value is not True:
        yield _diag(
            "async-tp",
            facts.async_tp,
            "enable_async_tensor_parallel needs compile.enable = true",
            "enable compile, or turn enable_async_tensor_parallel off",
        )


def value_constraints(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Checks v0.2.2 itself made while building the config (``__post_init__``)."""
    if facts.cp_load_balancer.value == "":
        yield _diag(
            "invalid-value",
            facts.cp_load_balancer,
            "context_parallel_load_balancer must not be empty",
            'use "headtail", "ptrr", or leave the key out',
        )
    steps = facts.validation_steps
    if _ints(steps) and steps.value == 0:  # below -1 is refused by the range check
        yield _diag(
            "invalid-value",
            steps,
            f"validation steps {steps.value} must be positive or -1 (the whole set)",
            "use -1 to validate on the whole set, or a positive number of steps",
        )


EXPERIMENT_MODELS = (
    "simple_fsdp.llama3",
    "simple_fsdp.deepseek_v3",
    "vlm",
    "compiler_toolkit.deepseek_v3",
    "compiler_toolkit.llama3",
    "transformers_modeling_backend",
    "autoparallel.llama3",
    "autoparallel.deepseek_v3",
    "autoparallel.local_map_deepseek_v3",
)
"""Train specs of torchtitan's experiments at v0.2.2 (their flavors are not checked)."""


def model_and_flavor(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The model is a known train spec and the flavor one of its flavors."""
    from titan.schemas import flavors, model_names
    from titan.schemas.fork_names import NO_FORK

    name, flavor = facts.model_name.value, facts.flavor.value
    if not isinstance(name, str) or not isinstance(flavor, str) or name in EXPERIMENT_MODELS:
        return
    names, fork = flavors.flavor_names(name), facts.fork or NO_FORK
    if (names is not None and flavor in names) or fork.builds(name, flavor):
        return
    if names is None and not fork.knows_family(name):
        yield _diag(
            "unknown-model",
            facts.model_name,
            f"model `{name}` is not a torchtitan v0.2.2 train spec; it must be registered by "
            "custom code (experimental.custom_import)",
            fork.family_hint(name)  # a declared family misspelt: not one to declare
            or model_names.model_hint(
                name,
                flavor if facts.flavor.written else None,
                experiments=EXPERIMENT_MODELS,
                declared=fork.registries_line(name, "yourpkg.models") if fork.registries else None,
            ),
            severity=Severity.WARNING,
        )
    else:
        yield _diag(
            "unknown-flavor",
            _blame(facts.flavor, facts.model_name),
            f"`{name}` has no flavor `{flavor}`",
            fork.flavor_hint(name, flavor, names or ()),
        )


def dataset_names(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The datasets are names the run's registry has (or the project declares): torchtitan looks
    them up only when the run starts, after every other check passed."""
    known = facts.datasets
    if known is None:
        return
    for setting in (facts.dataset, facts.validation_dataset):
        if setting is None or not setting.written or not isinstance(setting.value, str):
            continue  # a default is the registry's own name, or the model's loader picks one
        if known.knows(setting.value):
            continue
        severity, unless = Severity.ERROR, ""
        if known.custom_import:
            # the imported module runs before the loader and may add to its registry
            severity = Severity.WARNING
            unless = f" unless `{known.custom_import}` (experimental.custom_import) registers it"
        yield _diag(
            "invalid-value",
            setting,
            f'dataset "{setting.value}" is not registered; the run would fail when it starts'
            + unless,
            known.hint(setting.value),
            severity=severity,
        )


RULES: tuple[Callable[[ConfigFacts], Iterator[Diagnostic]], ...] = (
    model_and_flavor,
    dataset_names,
    parallel_degrees,
    world_size,
    expert_parallel,
    moe_routing,
    global_batch,
    sequence_length,
    tensor_parallel_heads,
    pipeline_layout_rule,
    checkpoint_keep,
    hf_model_only,
    converters,
    float8_options,
    optimizer_in_backward,
    activation_checkpointing,
    async_tensor_parallel,
    value_constraints,
)
"""Every cross-field rule, in the order their findings are reported."""


def check(facts: ConfigFacts) -> list[Diagnostic]:
    """Run every rule."""
    return [diagnostic for rule in RULES for diagnostic in rule(facts)]
