"""Profiler and memory-snapshot settings."""

from __future__ import annotations

import dataclasses


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
