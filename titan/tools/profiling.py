"""Profiler and memory-snapshot settings."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("titan")


@dataclasses.dataclass(kw_only=True, slots=True)
class ProfilingConfig:
    """The torch profiler and CUDA memory snapshots."""

    enable_profiling: bool = False
    """Turn on the torch profiler."""
    save_traces_folder: str = "profile_traces"
    """Sub-folder of dump_folder that receives profiler traces."""
    profile_freq: int = 10
    """Length of one profiling cycle in steps."""
    profiler_active: int = 1
    """Number of active (recorded) steps per profiling cycle."""
    profiler_warmup: int = 3
    """Number of warmup steps before the active window of each cycle."""
    enable_memory_snapshot: bool = False
    """Dump CUDA memory snapshots."""
    save_memory_snapshot_folder: str = "memory_snapshot"
    """Sub-folder of dump_folder that receives memory snapshots."""


class _NoProfiler:
    """Stands in for the profiler when profiling is off: ``step()`` does nothing."""

    def step(self) -> None:
        pass


def check_profiling(config: ProfilingConfig) -> None:
    """Refuse a profiler schedule whose warm-up and active steps do not fit in its cycle."""
    if not config.enable_profiling:
        return
    recorded = config.profiler_warmup + config.profiler_active
    if config.profiler_active < 1 or config.profiler_warmup < 0 or recorded > config.profile_freq:
        raise ValueError(
            f"profiling.profiler_warmup ({config.profiler_warmup}) + profiler_active "
            f"({config.profiler_active}) must fit in profile_freq ({config.profile_freq}), "
            "with at least one active step"
        )


@contextlib.contextmanager
def profiler_context(config: ProfilingConfig, *, dump_folder: str, rank: int) -> Iterator[Any]:
    """The torch profiler (and CUDA memory snapshots) as ``config`` asks; ``.step()`` per step.

    Each cycle of ``profile_freq`` steps waits, warms up for ``profiler_warmup`` steps and records
    ``profiler_active`` steps; each recorded window becomes
    ``<dump_folder>/<save_traces_folder>/iteration_<step>/rank<rank>_trace.json``.
    """
    if not config.enable_profiling and not config.enable_memory_snapshot:
        yield _NoProfiler()
        return
    import torch

    if config.enable_memory_snapshot and not torch.cuda.is_available():
        log.warning("profiling.enable_memory_snapshot records CUDA memory only; ignored on CPU")
    if not config.enable_profiling:
        yield _NoProfiler()
        return
    check_profiling(config)
    recorded = config.profiler_warmup + config.profiler_active
    folder = Path(dump_folder) / config.save_traces_folder

    def save_trace(profiler: Any) -> None:
        target = folder / f"iteration_{profiler.step_num}"
        target.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(target / f"rank{rank}_trace.json"))

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    schedule = torch.profiler.schedule(
        wait=config.profile_freq - recorded,
        warmup=config.profiler_warmup,
        active=config.profiler_active,
    )
    with torch.profiler.profile(
        activities=activities, schedule=schedule, on_trace_ready=save_trace, record_shapes=True
    ) as profiler:
        yield profiler
