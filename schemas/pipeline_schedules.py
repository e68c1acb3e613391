"""torch's pipeline schedules as titan knows them, and which stages each pipeline rank holds.

A torch-free table of every schedule name torch's ``get_schedule_class`` accepts (a test checks
it against torch): whether it runs one stage per rank or several, and how ranks get their
stages. :class:`PipelineSplitError` is the refusal every pipeline rule raises
(:mod:`titan.schemas.pipeline_split`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ScheduleKind = Literal["single", "multi"]
"""A schedule that runs one stage per rank, or several."""

PlacementStyle = Literal["loop", "v"]
"""How a rank's stages are chosen: every ``pp``-th stage, or the two ends of a V."""

_SETTING = "parallelism.pipeline_parallel_"


class PipelineSplitError(ValueError):
    """A pipeline layout that cannot be built, with the setting to change and how.

    ``str(error)`` is the message; ``hint`` says what to set; ``key`` is the config key the
    message is about, so a validator can point at the line that sets it."""

    def __init__(self, message: str, *, hint: str, key: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.key = key


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleFacts:
    """What titan needs to know about one of torch's pipeline schedules."""

    name: str
    """The name as ``torch.distributed.pipelining.schedules.get_schedule_class`` spells it."""
    kind: ScheduleKind
    """``single``: one stage per rank (a ``PipelineScheduleSingle``); ``multi``: two or more."""
    style: PlacementStyle
    """How ranks are given their stages (see :func:`stages_of_rank`)."""
    base_class: bool = False
    """A base class that only runs a schedule read from ``pipeline_parallel_schedule_csv``."""


SCHEDULES: tuple[ScheduleFacts, ...] = (
    ScheduleFacts(name="1F1B", kind="single", style="loop"),
    ScheduleFacts(name="GPipe", kind="single", style="loop"),
    ScheduleFacts(name="Interleaved1F1B", kind="multi", style="loop"),
    ScheduleFacts(name="LoopedBFS", kind="multi", style="loop"),
    ScheduleFacts(name="InterleavedZeroBubble", kind="multi", style="loop"),
    ScheduleFacts(name="ZBVZeroBubble", kind="multi", style="v"),
    ScheduleFacts(name="DualPipeV", kind="multi", style="v"),
    ScheduleFacts(name="PipelineScheduleSingle", kind="single", style="loop", base_class=True),
    ScheduleFacts(name="PipelineScheduleMulti", kind="multi", style="loop", base_class=True),
)
"""Every name torch 2.13's ``get_schedule_class`` knows; a test checks each against torch."""

_BY_LOWER = {facts.name.lower(): facts for facts in SCHEDULES}
_RUNNABLE = ", ".join(facts.name for facts in SCHEDULES if not facts.base_class)


def schedule_facts(name: object, *, csv: bool = False) -> ScheduleFacts:
    """The facts of the schedule ``name`` (any letter case, surrounding blanks ignored, as
    torch reads it); ``csv`` says whether a ``pipeline_parallel_schedule_csv`` is given."""
    key = f"{_SETTING}schedule"
    found = _BY_LOWER.get(name.strip().lower()) if isinstance(name, str) else None
    if found is None:
        raise PipelineSplitError(
            f"unknown pipeline schedule {name!r}; the schedules are {_RUNNABLE}",
            hint=f"set {key} to one of them (letter case does not matter)",
            key=key,
        )
    if found.base_class and not csv:
        raise PipelineSplitError(
            f"pipeline schedule {found.name!r} is a base class that runs only a schedule read "
            f"from {_SETTING}schedule_csv, and none is given",
            hint=f"set {_SETTING}schedule_csv, or {key} to one of {_RUNNABLE}",
            key=key,
        )
    return found


def canonical_schedule_name(name: object) -> str:
    """``name`` spelled as torch's table spells it (``"interleaved1f1b"`` ->
    ``"Interleaved1F1B"``); a base-class name is returned as it is."""
    return schedule_facts(name, csv=True).name


def stages_of_rank(rank: int, *, pp: int, stages: int, style: PlacementStyle) -> tuple[int, ...]:
    """The stages pipeline rank ``rank`` holds: every ``pp``-th from ``rank`` ("loop"), or
    ``(rank, stages - 1 - rank)`` ("v", two stages per rank)."""
    if not 0 <= rank < pp:
        raise PipelineSplitError(
            f"pipeline rank {rank} is outside 0..{pp - 1}",
            hint="pass a rank of the pipeline group",
            key="parallelism.pipeline_parallel_degree",
        )
    if stages % pp:
        raise PipelineSplitError(
            f"{stages} stages cannot be shared evenly by {pp} pipeline ranks",
            hint=f"use a multiple of {pp} stages",
            key=f"{_SETTING}layers_per_stage",
        )
    if style == "v":
        if stages != 2 * pp:
            raise PipelineSplitError(
                f"a V-shaped schedule runs exactly 2 stages per rank, not {stages} stages on "
                f"{pp} ranks",
                hint=f"use {2 * pp} stages",
                key=f"{_SETTING}layers_per_stage",
            )
        return (rank, stages - 1 - rank)
    return tuple(range(rank, stages, pp))
