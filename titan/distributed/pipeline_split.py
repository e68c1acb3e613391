"""Pipeline stages for the trainer: the split rules of :mod:`titan.schemas.pipeline_split`
(torch-free, shared with ``titan-validate`` and ``titan-migrate``) and torch's schedule class.

Only :func:`schedule_class` imports torch, when it is called.
"""

from __future__ import annotations

from typing import Any

from titan.schemas import pipeline_split as _split
from titan.schemas.pipeline_split import *  # noqa: F403  (the split rules, re-exported)
from titan.schemas.pipeline_split import schedule_facts

__all__ = [*_split.__all__, "SCHEDULE_KWARGS", "schedule_class"]

SCHEDULE_KWARGS: dict[str, Any] = {"scale_grads": False}
"""Keyword arguments every schedule is built with, as torchtitan builds them: torch must not
divide gradients by the microbatch count; the loss decides how they are scaled."""


def schedule_class(name: str, *, csv: bool = False) -> Any:
    """torch's schedule class to build with :data:`SCHEDULE_KWARGS`: ``_PipelineScheduleRuntime``
    when a ``pipeline_parallel_schedule_csv`` is given (it then loads the file), else the class
    of ``name``. Refuses an unknown name, or a base class without a CSV, with
    :class:`PipelineSplitError`."""
    facts = schedule_facts(name, csv=csv)
    from torch.distributed.pipelining import schedules  # torch only where schedules are built

    if csv:
        return schedules._PipelineScheduleRuntime
    return schedules.get_schedule_class(facts.name)
