"""How a decoder model is cut into pipeline stages, and which ranks hold which stages.

The rules are torchtitan's (``torchtitan/distributed/pipeline_parallel.py``, the same in v0.2.2
and 0.3.0), written once here so that ``titan-validate``, ``titan-migrate`` and the trainer
refuse the same layouts with the same words. Nothing here imports torch: the schedule table is
checked against torch's by a test, and ``titan.distributed.pipeline_split`` resolves the classes.

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
``(rank, S - 1 - rank)`` for the V-shaped schedules, so that rank 0 holds both ends
(:func:`~titan.schemas.pipeline_schedules.stages_of_rank`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from titan.schemas.pipeline_schedules import (
    SCHEDULES,
    PipelineSplitError,
    PlacementStyle,
    ScheduleFacts,
    ScheduleKind,
    canonical_schedule_name,
    schedule_facts,
    stages_of_rank,
)

_SETTING = "parallelism.pipeline_parallel_"

__all__ = [
    "SCHEDULES",
    "PipelineLayout",
    "PipelineSplitError",
    "PlacementStyle",
    "ScheduleFacts",
    "ScheduleKind",
    "canonical_schedule_name",
    "check_module_fqns",
    "model_modules",
    "pipeline_layout",
    "schedule_facts",
    "stage_count",
    "stage_modules",
    "stages_of_rank",
]


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
        return pp * _PER_RANK[facts.kind, facts.style].least
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
            f"{_suggest(units, _wanted(pp, facts))}",
            key=key,
        )
    per_rank = stages // pp
    rule = _PER_RANK[facts.kind, facts.style]
    if per_rank < rule.least or (rule.most is not None and per_rank > rule.most):
        raise PipelineSplitError(
            f"{shape}, {per_rank} per rank on {pp} pipeline ranks, but schedule "
            f"{facts.name!r} runs {rule.words} per rank",
            hint=f"set {key}{_suggest(units, _wanted(pp, facts))}, or {rule.instead}",
            key=key,
        )
    return stages


@dataclass(frozen=True, slots=True, kw_only=True)
class _PerRank:
    """How many stages a kind of schedule runs on each rank, and what to say when it cannot."""

    least: int
    """The fewest stages per rank it runs."""
    most: int | None
    """The most stages per rank it runs; ``None``: no bound."""
    words: str
    """That count in the message's words."""
    instead: str
    """The other schedules to offer in the hint."""


_PER_RANK: dict[tuple[ScheduleKind, PlacementStyle], _PerRank] = {
    ("single", "loop"): _PerRank(
        least=1,
        most=1,
        words="exactly 1 stage",
        instead="choose a multi-stage schedule such as Interleaved1F1B",
    ),
    ("multi", "loop"): _PerRank(
        least=2,
        most=None,
        words="at least 2 stages",
        instead="choose a single-stage schedule (1F1B or GPipe)",
    ),
    ("multi", "v"): _PerRank(
        least=2,
        most=2,
        words="exactly 2 stages (a V)",
        instead="choose Interleaved1F1B",
    ),
}
"""Stages per rank by schedule kind and placement, as torchtitan and torch require them."""


def _wanted(pp: int, facts: ScheduleFacts) -> list[int]:
    """Stage counts the schedule runs on ``pp`` ranks (the smallest few)."""
    rule = _PER_RANK[facts.kind, facts.style]
    return [pp * n for n in range(rule.least, (rule.most or rule.least + 2) + 1)]


def _suggest(units: int, wanted: list[int]) -> str:
    """The largest layers-per-stage value that gives one of the ``wanted`` stage counts, as
    text for a hint; where none does, leaving it unset gives the first of them."""
    values = [per for per in range(1, units + 1) if math.ceil(units / per) in wanted]
    if values:
        return f" (for example {max(values)})"
    return f" (no value gives {wanted[0]} stages for {units} units: leave it unset for {wanted[0]})"


def model_modules(n_layers: int, *, head: str = "output") -> list[str]:
    """Every module a stage can hold, in the order the model runs them."""
    return ["tok_embeddings", *_layer_names(0, n_layers), "norm", head]


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
        return [model_modules(n_layers, head=head)]
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
            f"{_SETTING}degree",
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
            f"{key} must be a list of lists of module names, not {_brief(parts)}",
            hint='write one list per stage, e.g. [["tok_embeddings", "layers.0"], ...]',
            key=key,
        )
    order = model_modules(n_layers, head=head)
    everything = ", ".join(_short(order))
    if len(parts) != stages:
        empty = f"{key} is an empty list, which gives the {stages} stages no modules"
        raise PipelineSplitError(
            empty
            if not parts
            else f"{key} has {len(parts)} parts but the pipeline has {stages} stages",
            hint=f"write {stages} lists, one per stage, or leave {key} unset to split evenly",
            key=key,
        )
    empty = [index for index, part in enumerate(parts) if not part]
    if empty:  # before the modules it leaves out: they are the ones meant for it
        raise PipelineSplitError(
            f"{key} leaves stage {empty[0]} empty (part {empty[0]} is [])",
            hint="give every stage at least one module",
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
    if names != order:
        wrong = next(a for a, b in zip(names, order, strict=True) if a != b)
        raise PipelineSplitError(
            f"{key} lists {wrong!r} out of the model's order ({everything})",
            hint="list the modules in the order the model runs them, stage by stage",
            key=key,
        )
    return [list(part) for part in parts]


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


def _brief(value: object) -> str:
    """``repr(value)``, cut to a length a message can show."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


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
            and index.isascii()
            and index.isdigit()
            and (not run or int(index) == run[-1] + 1)
        ):
            run.append(int(index))
            continue
        if run:
            out.append(f"layers.{run[0]}" if len(run) == 1 else f"layers.{run[0]}-{run[-1]}")
            run = []
        if name.startswith("layers.") and index.isascii() and index.isdigit():
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
