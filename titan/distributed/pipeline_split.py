"""How a decoder model is cut into pipeline stages, and which ranks hold which stages.

The rules are torchtitan's (``torchtitan/distributed/pipeline_parallel.py``, the same in v0.2.2
and 0.3.0), written once here so that ``titan-validate``, ``titan-migrate`` and the trainer
refuse the same layouts with the same words. Nothing here imports torch at module import: only
:func:`schedule_class` does, when a schedule is actually built.

A model of ``N`` layers is a chain of units::

    tok_embeddings | layers.0 | layers.1 | ... | layers.N-1 | norm + head
    \\_ weighs `in` _/                                        \\_ weighs `out` _/

The embeddings count as ``first_stage_less_layers`` (``in``) layers, norm and head together as
``last_stage_less_layers`` (``out``). ``E = N + in + out`` units are dealt to ``S`` stages as
evenly as possible, the first ``E % S`` stages one more; the first stage's budget pays for the
embeddings, the last one's for norm and head. 32 layers on 4 stages (in = out = 1)::

    stage 0: tok_embeddings, layers.0-7   stage 2: layers.17-24
    stage 1: layers.8-16                  stage 3: layers.25-31, norm, output

Ranks hold stages ``rank, rank + pp, rank + 2pp, ...`` ("loop"), or the pair
``(rank, S - 1 - rank)`` for the V-shaped schedules, so that rank 0 holds both ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

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


def stage_count(
    *,
    n_layers: int,
    pp: int,
    schedule: str,
    layers_per_stage: int | None = None,
    first_stage_less_layers: int = 1,
    last_stage_less_layers: int = 1,
    csv: bool = False,
) -> int:
    """How many stages the model is cut into: ``ceil((N + in + out) / layers_per_stage)``
    when that is set, else one per rank for a single-stage schedule and two per rank for a
    multi-stage one. Refuses a count the schedule or ``pp`` cannot run."""
    facts = schedule_facts(schedule, csv=csv)
    _check_counts(n_layers, first_stage_less_layers, last_stage_less_layers)
    _check_positive(pp, "parallelism.pipeline_parallel_degree")
    if layers_per_stage is None:
        return pp * (1 if facts.kind == "single" else 2)
    _check_positive(layers_per_stage, f"{_SETTING}layers_per_stage")
    units = n_layers + first_stage_less_layers + last_stage_less_layers
    stages = math.ceil(units / layers_per_stage)
    key = f"{_SETTING}layers_per_stage"
    shape = (
        f"{n_layers} layers + {first_stage_less_layers} (first_stage_less_layers) + "
        f"{last_stage_less_layers} (last_stage_less_layers) = {units} units at "
        f"{layers_per_stage} per stage make {stages} stages"
    )
    if stages % pp:
        raise PipelineSplitError(
            f"{shape}, which {pp} pipeline ranks (pipeline_parallel_degree) cannot share "
            f"evenly: the stage count must be a multiple of {pp}",
            hint=f"set {key} so that the stage count is a multiple of {pp}"
            f"{_suggest(units, _wanted(pp, facts.kind))}",
            key=key,
        )
    per_rank = stages // pp
    if facts.kind == "single" and per_rank != 1:
        raise PipelineSplitError(
            f"{shape}, {per_rank} per rank on {pp} pipeline ranks, but schedule "
            f"{facts.name!r} runs exactly 1 stage per rank",
            hint=f"set {key}{_suggest(units, [pp])}, or choose a multi-stage "
            "schedule such as Interleaved1F1B",
            key=key,
        )
    if facts.kind == "multi" and per_rank < 2:
        raise PipelineSplitError(
            f"{shape}, {per_rank} per rank on {pp} pipeline ranks, but schedule "
            f"{facts.name!r} runs at least 2 stages per rank",
            hint=f"set {key}{_suggest(units, _wanted(pp, 'multi'))}, or choose a single-stage "
            "schedule (1F1B or GPipe)",
            key=key,
        )
    if facts.style == "v" and per_rank != 2:
        raise PipelineSplitError(
            f"{shape}, {per_rank} per rank on {pp} pipeline ranks, but the V-shaped "
            f"schedule {facts.name!r} runs exactly 2 stages per rank",
            hint=f"set {key} to give {2 * pp} stages{_suggest(units, [2 * pp])}, or choose "
            "Interleaved1F1B",
            key=key,
        )
    return stages


def _wanted(pp: int, kind: ScheduleKind) -> list[int]:
    """Stage counts a schedule of ``kind`` runs on ``pp`` ranks (the smallest few)."""
    return [pp] if kind == "single" else [pp * k for k in range(2, 5)]


def _suggest(units: int, wanted: list[int]) -> str:
    """The largest layers-per-stage value that gives one of the ``wanted`` stage counts, as
    text for a hint (nothing when none does)."""
    values = [per for per in range(1, units + 1) if math.ceil(units / per) in wanted]
    return f" (for example {max(values)})" if values else ""


def stage_modules(
    *,
    n_layers: int,
    stages: int,
    first_stage_less_layers: int = 1,
    last_stage_less_layers: int = 1,
    head: str = "output",
) -> list[list[str]]:
    """The module names each stage holds (torchtitan's ``module_fqns_per_model_part`` when none
    is given); ``head`` is the output projection's name (``output`` in titan and v0.2.2,
    ``lm_head`` in torchtitan 0.3.0)."""
    first, last = first_stage_less_layers, last_stage_less_layers
    _check_counts(n_layers, first, last)
    _check_positive(stages, "the stage count")
    if stages == 1:
        return [["tok_embeddings", *_layer_names(0, n_layers), "norm", head]]
    units = n_layers + first + last
    base, extra = divmod(units, stages)
    what = (
        f"{n_layers} layers + {first} (first_stage_less_layers) + {last} "
        f"(last_stage_less_layers) = {units} units on {stages} stages"
    )
    if base == 0:
        raise PipelineSplitError(
            f"{what}: there are fewer units than stages, so a stage would be empty",
            hint=f"use at most {units} stages: raise {_SETTING}layers_per_stage or lower "
            "pipeline_parallel_degree",
            key=f"{_SETTING}layers_per_stage",
        )
    ends = (
        ("first_stage_less_layers", first, "first", "the embeddings"),
        ("last_stage_less_layers", last, "last", "norm and head"),
    )
    for setting, weight, end, modules in ends:
        if weight > base:
            raise PipelineSplitError(
                f"{what} give a stage as few as {base} units, fewer than the {weight} "
                f"({setting}) that the {end} stage spends on {modules}",
                hint=f"set {_SETTING}{setting} to at most {base}, or use fewer stages",
                key=f"{_SETTING}{setting}",
            )
    parts: list[list[str]] = []
    layer = 0
    for index in range(stages):
        budget = base + (1 if index < extra else 0)
        count = budget - (first if index == 0 else 0) - (last if index == stages - 1 else 0)
        names = _layer_names(layer, layer + count)
        layer += count
        if index == 0:
            names.insert(0, "tok_embeddings")
        if index == stages - 1:
            names += ["norm", head]
        parts.append(names)
    return parts


def check_module_fqns(
    parts: object, *, n_layers: int, stages: int, head: str = "output"
) -> list[list[str]]:
    """``parts`` (a ``module_fqns_per_model_part`` list) if it names every unit of an
    ``n_layers`` model once, in the model's order, in ``stages`` non-empty parts; refuses it
    otherwise, naming the modules that are wrong."""
    key = "parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not all(
        isinstance(part, list) and all(isinstance(n, str) for n in part) for part in parts
    ):
        raise PipelineSplitError(
            f"{key} must be a list of lists of module names, not {parts!r}",
            hint='write one list per stage, e.g. [["tok_embeddings", "layers.0"], ...]',
            key=key,
        )
    order = ["tok_embeddings", *_layer_names(0, n_layers), "norm", head]
    everything = ", ".join(_short(order))
    if len(parts) != stages:
        raise PipelineSplitError(
            f"{key} has {len(parts)} parts but the pipeline has {stages} stages",
            hint=f"write {stages} lists, one per stage, or leave {key} unset to split evenly",
            key=key,
        )
    names = [name for part in parts for name in part]
    unknown = [name for name in names if name not in order]
    if unknown:
        raise PipelineSplitError(
            f"{key} names {', '.join(repr(n) for n in unknown)}, which "
            f"{'is' if len(unknown) == 1 else 'are'} no module of this {n_layers}-layer "
            f"model (its modules are {everything})",
            hint="use the model's module names; name each layer as layers.<i>",
            key=key,
        )
    repeated = sorted({n for n in names if names.count(n) > 1}, key=order.index)
    if repeated:
        raise PipelineSplitError(
            f"{key} names {', '.join(repr(n) for n in repeated)} more than once",
            hint="give each module to exactly one stage",
            key=key,
        )
    missing = [name for name in order if name not in names]
    if missing:
        raise PipelineSplitError(
            f"{key} leaves out {', '.join(_short(missing))}; a stage would run without them",
            hint="give every module of the model to one stage",
            key=key,
        )
    empty = [index for index, part in enumerate(parts) if not part]
    if empty:
        raise PipelineSplitError(
            f"{key} leaves stage {empty[0]} empty",
            hint="give every stage at least one module",
            key=key,
        )
    if names != order:
        wrong = next(a for a, b in zip(names, order, strict=True) if a != b)
        raise PipelineSplitError(
            f"{key} lists {wrong!r} out of the model's order ({everything})",
            hint="list the modules in the order the model runs them, stage by stage",
            key=key,
        )
    return [list(part) for part in parts]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineLayout:
    """A checked pipeline: the schedule, every stage's modules and each rank's stages."""

    schedule: ScheduleFacts
    """The schedule the stage count was chosen for."""
    stages: int
    """How many stages the model is cut into."""
    modules: list[list[str]]
    """The module names of each stage, in stage order."""
    rank_stages: list[tuple[int, ...]]
    """The stages of each pipeline rank, indexed by rank."""


def pipeline_layout(
    *,
    n_layers: int,
    pp: int,
    schedule: str = "1F1B",
    layers_per_stage: int | None = None,
    first_stage_less_layers: int = 1,
    last_stage_less_layers: int = 1,
    module_fqns_per_model_part: list[list[str]] | None = None,
    csv: bool = False,
    head: str = "output",
) -> PipelineLayout:
    """Every check of this module on one parallelism config, and the layout it gives."""
    facts = schedule_facts(schedule, csv=csv)
    stages = stage_count(
        n_layers=n_layers,
        pp=pp,
        schedule=schedule,
        layers_per_stage=layers_per_stage,
        first_stage_less_layers=first_stage_less_layers,
        last_stage_less_layers=last_stage_less_layers,
        csv=csv,
    )
    if module_fqns_per_model_part is None:
        modules = stage_modules(
            n_layers=n_layers,
            stages=stages,
            first_stage_less_layers=first_stage_less_layers,
            last_stage_less_layers=last_stage_less_layers,
            head=head,
        )
    else:
        modules = check_module_fqns(
            module_fqns_per_model_part, n_layers=n_layers, stages=stages, head=head
        )
    ranks = [stages_of_rank(r, pp=pp, stages=stages, style=facts.style) for r in range(pp)]
    return PipelineLayout(schedule=facts, stages=stages, modules=modules, rank_stages=ranks)


def schedule_class(name: str, *, csv: bool = False) -> Any:
    """torch's schedule class to build: ``_PipelineScheduleRuntime`` when a schedule CSV is
    given (it loads the file), else the class of ``name``. Build it with
    :data:`SCHEDULE_KWARGS`; this is the one function here that imports torch."""
    facts = schedule_facts(name, csv=csv)
    from torch.distributed.pipelining import schedules  # torch only where schedules are built

    if csv:
        return schedules._PipelineScheduleRuntime
    return schedules.get_schedule_class(facts.name)


SCHEDULE_KWARGS: dict[str, Any] = {"scale_grads": False}
"""Keyword arguments every schedule is built with: the loss is already divided by the step's
token count, so torch must not divide gradients by the microbatch count again."""


def _layer_names(start: int, stop: int) -> list[str]:
    """``layers.<i>`` for ``start <= i < stop``."""
    return [f"layers.{i}" for i in range(start, stop)]


def _short(names: list[str]) -> list[str]:
    """``names`` with runs of consecutive layers written as ``layers.3-9``."""
    out: list[str] = []
    run: list[int] = []
    for name in [*names, ""]:
        index = name.removeprefix("layers.")
        if (
            name.startswith("layers.")
            and index.isdigit()
            and (not run or int(index) == run[-1] + 1)
        ):
            run.append(int(index))
            continue
        if run:
            out.append(f"layers.{run[0]}" if len(run) == 1 else f"layers.{run[0]}-{run[-1]}")
            run = []
        if name.startswith("layers.") and index.isdigit():
            run = [int(index)]
        elif name:
            out.append(name)
    return out


def _check_counts(n_layers: int, first: int, last: int) -> None:
    """Refuses a negative or non-integer layer count or stage weight."""
    for value, what in (
        (n_layers, "the model's layer count"),
        (first, f"{_SETTING}first_stage_less_layers"),
        (last, f"{_SETTING}last_stage_less_layers"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PipelineSplitError(
                f"{what} must be a whole number of 0 or more, not {value!r}",
                hint=f"set {what} to 0 or more",
                key=what if what.startswith("parallelism") else f"{_SETTING}degree",
            )
    if n_layers == 0:
        raise PipelineSplitError(
            "the model has no layers to split into pipeline stages",
            hint="run without pipeline parallel (pipeline_parallel_degree = 1)",
            key=f"{_SETTING}degree",
        )


def _check_positive(value: int, what: str) -> None:
    """Refuses a count that is not a whole number of 1 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineSplitError(
            f"{what} must be a whole number of 1 or more, not {value!r}",
            hint=f"set {what} to 1 or more",
            key=what if what.startswith("parallelism") else f"{_SETTING}layers_per_stage",
        )
