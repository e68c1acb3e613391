"""The pipeline layout rule: the stages a config cuts its model into can be built and shared.

Reads the pipeline facts of :class:`~titan.schemas.rule_facts.ConfigFacts` (both config forms
fill them) and asks :mod:`titan.schemas.pipeline_split` -- the same rules the trainer applies --
whether the schedule exists, the stage count suits the schedule and the pipeline ranks, the
model has enough layers for the stages, and a ``module_fqns_per_model_part`` list names every
module once, in order; a schedule CSV's actions fit the layout and run to the end
(:mod:`titan.schemas.pipeline_csv`). Each refusal becomes one finding at the line of the key it
is about.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.pipeline_batches import batch_problems, microbatch_count
from titan.schemas.pipeline_csv import ScheduleCsvError, read_schedule_csv
from titan.schemas.pipeline_split import (
    PipelineSplitError,
    check_module_fqns,
    pipeline_layout,
    schedule_facts,
)
from titan.schemas.ranges import is_int64
from titan.schemas.rule_facts import ConfigFacts, Setting
from titan.schemas.rule_helpers import diag

CODE = "pipeline-layout"
"""The finding code of every pipeline layout problem."""

MAX_LAYERS = 2_000
"""Deeper models get only the schedule checked: comparing a module list against every module
of the model costs the product of the two lengths."""

_HEAD = "output"
"""The output projection's module name in titan's models (and torchtitan v0.2.2)."""


def pipeline_layout_rule(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """With pipeline parallel on, the schedule is one torch runs and the model splits into
    stages its ranks can share, fed microbatches the schedule can run (training and validation);
    without it, a ``module_fqns_per_model_part`` list is ignored."""
    if not _readable(facts):
        return
    pp = facts.pp.value
    fqns = facts.pp_module_fqns
    if pp == 1:
        if fqns.written and fqns.value:
            yield _finding(
                fqns,
                f"{fqns.path} is ignored: pipeline_parallel_degree is 1, so the model is not "
                "split into stages",
                "remove it, or set pipeline_parallel_degree above 1",
                severity=Severity.WARNING,
            )
        return
    csv = bool(facts.pp_schedule_csv.value)
    n_layers = facts.n_layers
    modules = n_layers + 3 if n_layers is not None else 0  # embeddings, norm, head
    listed = sum(len(part) for part in fqns.value or ())
    if n_layers is not None and listed > 2 * modules:
        # so long a list repeats or invents modules; said here, before a quadratic search
        yield _finding(
            fqns,
            f"{fqns.path} names {listed} modules, but this {n_layers}-layer model has {modules}",
            "give every module of the model to one stage, once",
        )
        return
    try:
        schedule_facts(facts.pp_schedule.value, csv=csv)
    except PipelineSplitError as error:
        # no stage count without a schedule; the list's names are still checked, in one pass
        yield _finding(_setting_of(facts, error.key), error.message, error.hint)
        if fqns.value and n_layers is not None and n_layers <= MAX_LAYERS:
            try:
                check_module_fqns(fqns.value, n_layers=n_layers, stages=len(fqns.value), head=_HEAD)
            except PipelineSplitError as names:
                yield _finding(_setting_of(facts, names.key), names.message, names.hint)
        return
    try:
        if n_layers is None or n_layers > MAX_LAYERS:
            # a model titan cannot size (a project's own family) or too deep to list: only the
            # schedule, which does not depend on the model, is checked
            schedule_facts(facts.pp_schedule.value, csv=csv)
            return
        layout = pipeline_layout(
            n_layers=n_layers,
            pp=pp,
            schedule=facts.pp_schedule.value,
            layers_per_stage=facts.pp_layers_per_stage.value,
            first_stage_less_layers=facts.pp_first_less.value,
            last_stage_less_layers=facts.pp_last_less.value,
            module_fqns_per_model_part=fqns.value,  # [] is refused by the run, not unset
            csv=csv,
            head=_HEAD,
        )
    except PipelineSplitError as error:
        yield _finding(_setting_of(facts, error.key), error.message, error.hint)
        return
    if csv:
        not_a_file = _not_a_file(facts.pp_schedule_csv)
        if not_a_file is not None:
            yield not_a_file
            return
    problems = list(
        _batches(facts, schedule=None if csv else layout.schedule.name, stages=layout.stages)
    )
    yield from problems
    if csv and not problems:
        yield from _schedule_csv(facts, rank_stages=layout.rank_stages)


def _schedule_csv(
    facts: ConfigFacts, *, rank_stages: list[tuple[int, ...]]
) -> Iterator[Diagnostic]:
    """The schedule CSV's actions fit this layout and run to the end
    (:mod:`titan.schemas.pipeline_csv`); a path that is no file is the trainer's to refuse."""
    local, size, setting = facts.local_batch_size, facts.pp_microbatch_size, facts.pp_schedule_csv
    if not (_count(local.value, least=1) and _count(size.value, least=1)):
        return
    if not os.path.isfile(setting.value):
        return
    microbatches = microbatch_count(local_batch_size=local.value, microbatch_size=size.value)
    try:
        read_schedule_csv(setting.value, rank_stages=rank_stages, microbatches=microbatches)
    except ScheduleCsvError as error:
        yield _finding(setting, error.message, error.hint)


# What a path is when it is not a regular file, in the user's words (told by ``stat``: a FIFO is
# never opened, which would wait for a writer).
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_a_file(setting: Setting) -> Diagnostic | None:
    """The run's refusal of a schedule CSV path that names something other than a file (a
    folder, a FIFO); None for a file, or a path not there (the machine that trains may have
    it)."""
    try:
        mode = os.stat(setting.value).st_mode
    except (OSError, ValueError):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), None)
    if kind is None:
        return None
    return _finding(
        setting,
        f"{setting.path} {setting.value!r} is {kind}, not a file: the run refuses it",
        "give the path of the schedule's CSV file, or leave it empty to run the named schedule",
    )


def _batches(facts: ConfigFacts, *, schedule: str | None, stages: int) -> Iterator[Diagnostic]:
    """The microbatches the schedule is fed (``titan.schemas.pipeline_batches``), once the batch
    sizes are numbers the rule can read."""
    local, size = facts.local_batch_size, facts.pp_microbatch_size
    validating = facts.validation_enable.value is True
    validation = facts.validation_batch_size
    rows = validation.value if validation.value is not None else local.value
    if not (_count(local.value, least=1) and _count(size.value, least=1)):
        return
    if validating and not _count(rows, least=1):
        return
    blamed = {
        "microbatch_size": size,
        "schedule": facts.pp_schedule,
        "validation_batch": validation if validation.written else facts.validation_enable,
    }
    for fact, message, hint in batch_problems(
        schedule=schedule,
        stages=stages,
        pp=facts.pp.value,
        local_batch_size=local.value,
        microbatch_size=size.value,
        validation_batch_size=rows if validating else None,
    ):
        setting = blamed[fact]
        written = next((s for s in (setting, size, facts.pp) if s.written), setting)
        yield _finding(written, message, hint)


def _readable(facts: ConfigFacts) -> bool:
    """Whether every pipeline setting has a type and range the rule can read (a wrong type or
    range is the type and range checks' finding, not this one's)."""
    pp = facts.pp
    pipeline = (
        facts.pp_schedule,
        facts.pp_schedule_csv,
        facts.pp_layers_per_stage,
        facts.pp_first_less,
        facts.pp_last_less,
        facts.pp_module_fqns,
    )
    if any(setting is None for setting in pipeline):
        return False  # a caller that builds no pipeline facts
    schedule, csv, per_stage, first, last, fqns = pipeline
    layers = facts.n_layers
    return bool(
        _count(pp.value, least=1)
        and isinstance(schedule.value, str)
        and (csv.value is None or isinstance(csv.value, str))
        and (per_stage.value is None or _count(per_stage.value, least=1))
        and _count(first.value, least=0)
        and _count(last.value, least=0)
        and (fqns.value is None or _names(fqns.value))
        and (layers is None or _count(layers, least=1))
    )


def _count(value: object, *, least: int) -> bool:
    """Whether ``value`` is a whole number (not a bool) of at least ``least``."""
    return is_int64(value) and value >= least


def _names(value: object) -> bool:
    """Whether ``value`` is a list of lists of strings (the key's type)."""
    return isinstance(value, list) and all(
        isinstance(part, list) and all(isinstance(name, str) for name in part) for part in value
    )


def _setting_of(facts: ConfigFacts, key: str) -> Setting:
    """The setting a refusal's ``key`` names, where the user wrote it; else the degree (or the
    schedule) that asked for the pipeline, so the finding has a line to stand on."""
    by_path = {
        setting.path: setting
        for setting in (
            facts.pp,
            facts.pp_schedule,
            facts.pp_layers_per_stage,
            facts.pp_first_less,
            facts.pp_last_less,
            facts.pp_module_fqns,
        )
    }
    keyed = by_path.get(key)
    if keyed is None:
        # the registry form may spell the path otherwise: match its last component
        tail = key.rpartition(".")[2]
        keyed = next((s for p, s in by_path.items() if p.rpartition(".")[2] == tail), facts.pp)
    return next((s for s in (keyed, facts.pp, facts.pp_schedule) if s.written), keyed)


def _finding(
    setting: Setting, message: str, hint: str, *, severity: Severity = Severity.ERROR
) -> Diagnostic:
    """A pipeline-layout finding at ``setting``."""
    return diag(CODE, setting, message, hint, severity=severity)
