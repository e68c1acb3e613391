"""What a pipeline schedule asks of the batches it is fed: the microbatch size divides the local
batch, torch 2.13's schedules get a microbatch count they can run, and validation batches cut
into the same microbatches through a schedule that can run forward only.

Torch-free and shared: the pipeline layout rule (``titan.schemas.pipeline_rules``) reports these
for ``titan-validate`` (both forms), ``titan-train --preflight`` and the run's own checks, and the
trainer cuts its batches by :func:`microbatch_count`.
"""

from __future__ import annotations

from collections.abc import Callable


def microbatch_count(*, local_batch_size: int, microbatch_size: int) -> int:
    """How many pipeline microbatches one local batch is cut into (that the size divides the
    batch is :func:`batch_problems`' first question)."""
    return local_batch_size // microbatch_size


def _at_least_stages(microbatches: int, *, stages: int, pp: int) -> str | None:
    """torch's 1F1B and DualPipeV: no fewer microbatches than stages."""
    return None if microbatches >= stages else f"at least as many microbatches as stages ({stages})"


def _whole_rounds(microbatches: int, *, stages: int, pp: int) -> str | None:
    """torch's interleaved schedules: whole rounds of ``microbatches // pp`` microbatches."""
    rounds = max(1, microbatches // pp)
    if microbatches % rounds == 0:
        return None
    return (
        "a microbatch count that is a multiple of microbatches // pipeline_parallel_degree "
        f"({rounds})"
    )


MICROBATCH_RULES: dict[str, Callable[..., str | None]] = {
    "1F1B": _at_least_stages,
    "DualPipeV": _at_least_stages,
    "Interleaved1F1B": _whole_rounds,
    "InterleavedZeroBubble": _whole_rounds,
}
"""What torch 2.13's schedules ask of the microbatch count, by schedule name (the others run
any count); each returns the requirement in words when the count breaks it."""

NO_FORWARD_ONLY = frozenset({"ZBVZeroBubble", "DualPipeV"})
"""Schedules whose ``eval`` (forward only, for validation) torch 2.13 cannot run: their V
stages split backward into parts that assume one ran ("can't steal_bwd_input if this stage
doesn't have backward")."""


def batch_problems(
    *,
    schedule: str | None,
    stages: int,
    pp: int,
    local_batch_size: int,
    microbatch_size: int,
    validation_batch_size: int | None,
) -> list[tuple[str, str, str]]:
    """What the pipeline cannot run of these batches, as ``(fact, message, hint)``; ``fact`` is
    the setting to blame: "microbatch_size", "schedule" or "validation_batch".

    ``schedule`` is the named schedule (None for a CSV schedule, whose rows fix the count);
    ``validation_batch_size`` the validation batch's rows, None without validation.
    """
    if microbatch_size < 1 or local_batch_size % microbatch_size:
        return [
            (
                "microbatch_size",
                f"pipeline_parallel_microbatch_size ({microbatch_size}) must divide "
                f"training.local_batch_size ({local_batch_size}): each local batch is cut into "
                "microbatches of that many rows",
                "set it to a divisor of the local batch size",
            )
        ]
    microbatches = microbatch_count(
        local_batch_size=local_batch_size, microbatch_size=microbatch_size
    )
    found = []
    needed = MICROBATCH_RULES.get(schedule or "", lambda *_, **__: None)(
        microbatches, stages=stages, pp=pp
    )
    if needed is not None:
        found.append(
            (
                "schedule",
                f"schedule {schedule!r} needs {needed}, but training.local_batch_size "
                f"({local_batch_size}) / pipeline_parallel_microbatch_size ({microbatch_size}) "
                f"gives {microbatches}",
                "raise training.local_batch_size or lower "
                "parallelism.pipeline_parallel_microbatch_size",
            )
        )
    if validation_batch_size is None:
        return found
    if schedule in NO_FORWARD_ONLY:
        found.append(
            (
                "schedule",
                f"validation does not run with schedule {schedule!r}: torch cannot run its "
                "V-shaped stages forward only",
                "choose another schedule (Interleaved1F1B runs 2 stages per rank too), or turn "
                "validation off",
            )
        )
    elif validation_batch_size % microbatches:
        found.append(
            (
                "validation_batch",
                f"the validation batch ({validation_batch_size} rows) must be a multiple of the "
                f"pipeline's {microbatches} microbatches (training.local_batch_size / "
                "pipeline_parallel_microbatch_size): validation runs each batch through the "
                "same schedule",
                f"use a validation local_batch_size that is a multiple of {microbatches}",
            )
        )
    return found
