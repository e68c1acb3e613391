"""The layout rules: which parallel degrees, batch and sequence sizes, and compile, checkpointing
and offload switches can run together. One implementation, read by ``titan-validate`` (both config
forms, ``--ngpu N``), ``titan-train --preflight`` and the trainer itself before it builds anything
(``titan.training.run_checks``), so the three accept and refuse the same layouts with the same
code and hint. Each rule is a function over :class:`ConfigFacts`."""

from __future__ import annotations

import math
from collections.abc import Iterator

from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.ranges import INT64_MAX, is_int64
from titan.schemas.rule_facts import ConfigFacts
from titan.schemas.rule_helpers import blame, degrees, diag, ints, largest_divisor


def parallel_degrees(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The FSDP shard degree is -1 (use what is left) or at least 1; the range check
    (``titan.schemas.ranges``) refuses the values below -1 and every other degree below 1."""
    shard = facts.dp_shard
    if ints(shard) and shard.value == 0:
        yield diag(
            "parallel-degree",
            shard,
            f"`{shard.path}` is 0; it must be -1 or at least 1",
            "-1 uses every GPU the other degrees leave",
        )


def resolve_dp_shard(
    shard: int, *, world_size: int | None, replicate: int, tp: int, pp: int, cp: int
) -> int | None:
    """The FSDP shard degree of a layout: ``shard`` itself, or for -1 the ranks of
    ``world_size`` the other degrees leave over. ``None`` when -1 cannot be resolved: the world
    size is unknown, or not a multiple of the other degrees (the ``world-size`` finding).

    The one resolution of -1: the rules, the trainer's ``ParallelDims`` and the capability
    check (``titan.protocols.model_spec``) all call it.
    """
    if shard != -1:
        return shard
    others = replicate * tp * pp * cp
    if world_size is None or others < 1 or world_size % others:
        return None
    return world_size // others


def resolved_dp_shard(facts: ConfigFacts) -> int | None:
    """The FSDP shard degree of ``facts`` (``resolve_dp_shard``); None when unknown."""
    if not ints(*degrees(facts)):
        return None
    return resolve_dp_shard(
        facts.dp_shard.value,
        world_size=facts.ngpu,
        replicate=facts.dp_replicate.value,
        tp=facts.tp.value,
        pp=facts.pp.value,
        cp=facts.cp.value,
    )


def _gpus(count: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def world_size(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The parallel degrees multiply to the number of GPUs (``--ngpu``)."""
    if facts.ngpu is None or not ints(*degrees(facts)):
        return
    if any(s.value < 1 and not (s is facts.dp_shard and s.value == -1) for s in degrees(facts)):
        return  # reported by parallel_degrees and the range check
    named = [s for s in degrees(facts) if s is not facts.dp_shard and s.value > 1]
    others = math.prod(s.value for s in named)
    shown = " × ".join(f"{s.path.rsplit('.', 1)[-1]}={s.value}" for s in named) or "1"
    if facts.dp_shard.value == -1:
        if facts.ngpu % others:
            worst = max(named, key=lambda s: s.value)
            yield diag(
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
        yield diag(
            "world-size",
            facts.dp_shard,
            f"the parallel degrees multiply to {total} ({shown} × dp_shard={facts.dp_shard.value}) "
            f"but --ngpu is {facts.ngpu}",
            "set data_parallel_shard_degree = -1 to use every remaining GPU",
        )


def global_batch(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """global_batch_size (when set) is a positive multiple of local_batch_size × data-parallel degree."""
    gbs, lbs = facts.global_batch_size, facts.local_batch_size
    if not ints(gbs, lbs):
        return
    if lbs.value < 1:
        return  # refused by the range check
    if gbs.value < 0:
        return  # v0.2.2 treats any negative value as local batch size x DP degree
    if gbs.value == 0:
        yield diag(
            "batch-size",
            gbs,
            f"global batch size {gbs.value} must be -1 or positive",
            "use -1 (local batch size × data-parallel degree), or a positive multiple of it",
        )
        return
    shard = resolved_dp_shard(facts)
    dp = (
        facts.dp_replicate.value * shard if shard is not None and ints(facts.dp_replicate) else None
    )
    unit, what = (
        (lbs.value * dp, f"local_batch_size × data-parallel degree = {lbs.value} × {dp}")
        if dp
        else (lbs.value, "local_batch_size")
    )
    if gbs.value % unit:
        yield diag(
            "batch-size",
            gbs,
            f"global batch size {gbs.value} is not a multiple of {what} = {unit}",
            f"use a multiple of {unit}, e.g. {max(unit, gbs.value // unit * unit)}",
        )


def sequence_length(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """With TP or CP, the training and validation sequence lengths are divisible by tp × 2·cp:
    context parallel cuts a sequence into 2·cp chunks, sequence parallel each rank's share
    into tp slices."""
    tp, cp = facts.tp, facts.cp
    if not ints(tp, cp) or (tp.value <= 1 and cp.value <= 1) or tp.value < 1 or cp.value < 1:
        return
    if facts.ngpu is not None and facts.ngpu % (tp.value * cp.value):
        return  # the degrees cannot run on these GPUs (world_size says so): fix them first
    unit = tp.value * 2 * cp.value
    lengths = [facts.seq_len]
    validation = facts.validation_seq_len
    if facts.validation_enable.value is True and validation.value not in (
        None,
        facts.seq_len.value,
    ):
        lengths.append(validation)  # the same length would be the same finding
    for seq in lengths:
        if ints(seq) and seq.value % unit:
            yield diag(
                "seq-len",
                blame(seq, tp, cp),
                f"sequence length {seq.value} is not divisible by tp × 2·cp = {unit}",
                f"use a sequence length divisible by {unit}, e.g. "
                f"{max(unit, seq.value // unit * unit)}, or other tensor/context parallel degrees",
            )


def validation_sequence_length(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """With validation on, its sequences are no longer than the model's max_seq_len (titan's
    decoders, like torchtitan's, take it from training.seq_len): the rotary position tables
    cover no more positions, so a longer validation sequence would stop the run at its first
    validation, after training."""
    limit, validation, training = facts.max_seq_len, facts.validation_seq_len, facts.seq_len
    if facts.validation_enable.value is not True or not is_int64(limit):
        return  # off, a model without rotary tables, or a length the range check refuses
    if not ints(validation) or validation.value <= limit:
        return  # unset: validation follows training.seq_len
    follows = f" ({training.path})" if ints(training) and training.value == limit else ""
    yield diag(
        "seq-len",
        blame(validation, training),
        f"{validation.path} {validation.value} is longer than the model's max_seq_len "
        f"{limit}{follows}: its rotary position tables cover {limit} positions, so the first "
        "validation would stop the run",
        f"set {validation.path} to at most {limit}, or raise {training.path} to {validation.value}",
    )


def tensor_parallel_heads(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The TP degree divides the attention heads and the key/value heads."""
    tp = facts.tp
    if not ints(tp) or tp.value <= 1:
        return
    for heads, kind in ((facts.n_heads, "attention heads"), (facts.n_kv_heads, "key/value heads")):
        if heads is not None and heads % tp.value:
            yield diag(
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
    ``--ngpu``, the GPU count (1 when none does)."""
    counts = [count for count in (facts.n_heads, facts.n_kv_heads, facts.ngpu) if count]
    return largest_divisor(math.gcd(*counts), at_most=at_most) if counts else 1


def selective_interval(option: str) -> int | None:
    """Every how many blocks selective activation checkpointing wraps one: ``None`` for "op"
    (a per-op policy on every block); ``ValueError`` unless ``option`` is "op" or a positive
    whole number that fits 64 bits (the trainer applies what this accepts)."""
    if option == "op":
        return None
    if option.isascii() and option.isdigit() and len(option) <= 19:
        every = int(option)
        if 0 < every <= INT64_MAX:
            return every
    raise ValueError(option)


def activation_checkpointing(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The selective option is "op" or a positive integer; memory_budget mode needs compile."""
    mode, option = facts.ac_mode.value, facts.selective_ac_option.value
    if mode == "selective" and isinstance(option, str):
        try:
            selective_interval(option)
        except ValueError:
            shown = option if len(option) <= 40 else option[:37] + "..."
            yield diag(
                "activation-checkpoint",
                facts.selective_ac_option,
                f'selective_ac_option "{shown}" must be "op" or a positive integer such as "2"',
                'use "op" (a per-op policy) or "N" to checkpoint every N-th layer',
            )
    if mode == "memory_budget" and not model_compiled(facts):
        yield diag(
            "activation-checkpoint",
            facts.ac_mode,
            "memory_budget activation checkpointing needs the model compiled",
            f'{COMPILE_THE_MODEL}, or use activation checkpointing mode "selective" or "full"',
        )


def model_compiled(facts: ConfigFacts) -> bool:
    """Whether the model's blocks are compiled: compile.enable with "model" in
    compile.components (compiling only the loss does not compile the model)."""
    components = facts.compile_components.value
    return (
        facts.compile_enable.value is True
        and isinstance(components, list)
        and "model" in components
    )


COMPILE_THE_MODEL = 'set compile.enable = true with "model" in compile.components'


def async_tensor_parallel(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Async TP needs the model compiled; without TP it does nothing (v0.2.2 only reads it when
    TP is on), which is said rather than passed over."""
    if facts.async_tp.value is not True or not ints(facts.tp):
        return
    if facts.tp.value <= 1:
        yield diag(
            "async-tp",
            facts.async_tp,
            "enable_async_tensor_parallel has no effect: tensor_parallel_degree is "
            f"{facts.tp.value}",
            "turn enable_async_tensor_parallel off, or set tensor_parallel_degree > 1",
            severity=Severity.WARNING,
        )
    elif not model_compiled(facts):
        yield diag(
            "async-tp",
            facts.async_tp,
            "enable_async_tensor_parallel needs the model compiled",
            f"{COMPILE_THE_MODEL}, or turn enable_async_tensor_parallel off",
        )


def replication_layout(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """DDP (replicas that are not sharded) runs alone: v0.2.2 refuses it with any other
    parallelism ("DDP has not supported > 1D parallelism"), and so does titan-train."""
    replicate, tp, pp, cp = facts.dp_replicate, facts.tp, facts.pp, facts.cp
    if not ints(replicate, tp, pp, cp) or replicate.value <= 1:
        return
    if resolved_dp_shard(facts) != 1:
        return  # HSDP (sharded replicas), or a shard degree still unknown
    others = [s for s in (tp, pp, cp) if s.value > 1]
    if others:
        named = " and ".join(f"{s.path.rsplit('.', 1)[-1]} = {s.value}" for s in others)
        yield diag(
            "ddp-layout",
            replicate,
            f"DDP (data_parallel_replicate_degree = {replicate.value} with "
            f"data_parallel_shard_degree = 1) cannot be combined with {named}",
            "shard the replicas (HSDP: data_parallel_shard_degree > 1), or use FSDP "
            "(data_parallel_replicate_degree = 1)",
        )


def cpu_offload(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """CPU offload moves FSDP's shards to the CPU: without FSDP there is nothing to offload."""
    if facts.cpu_offload.value is not True or not ints(facts.cp):
        return
    shard = resolved_dp_shard(facts)
    if shard == 1 and facts.cp.value == 1:
        yield diag(
            "cpu-offload",
            facts.cpu_offload,
            "training.enable_cpu_offload offloads FSDP shards, and this layout has none "
            "(data_parallel_shard_degree is 1)",
            "set data_parallel_shard_degree > 1 (or -1 on several GPUs), or turn "
            "enable_cpu_offload off",
        )


HEAD_TAIL = "headtail"
OTHER_BALANCERS = {
    "ptrr": "torch's processing-time round-robin balancer (FlexAttention only)",
    None: "no load balancing (contiguous slices)",
}
"""The other load balancers v0.2.2 could name, in words."""


def context_parallel_options(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Context parallel settings titan-train accepts but does not act on: it all-gathers keys
    and values (no ring whose rotation could be chosen) and always balances head-tail."""
    rotate, balancer, cp = facts.cp_rotate_method, facts.cp_load_balancer, facts.cp
    if isinstance(rotate.value, str) and rotate.value != "allgather":
        yield diag(
            "no-effect",
            rotate,
            f"context_parallel_rotate_method = {rotate.value!r} has no effect in titan-train: "
            "context parallel all-gathers the keys and values along the sequence (it has no "
            "ring to rotate)",
            'leave it out, or set it to "allgather"',
            severity=Severity.WARNING,
        )
    cp_on = ints(cp) and cp.value > 1
    if cp_on and balancer.value != HEAD_TAIL and balancer.value != "":
        what = OTHER_BALANCERS.get(balancer.value, "unknown to torch")
        yield diag(
            "no-effect",
            balancer,
            f"context_parallel_load_balancer = {balancer.value!r} ({what}) has no effect in "
            "titan-train: context parallel always balances head-tail (rank r holds chunks r and "
            "2·cp−1−r); the results are the same",
            f'leave it out, or set it to "{HEAD_TAIL}"',
            severity=Severity.WARNING,
        )
