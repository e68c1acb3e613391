"""Built-in copy of ``torchtitan.experiments.simple_fsdp.job_config`` at v0.2.2."""

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Compile:
    """SimpleFSDP additions to ``[compile]``."""

    graph_passes: Literal["auto_bucketing", "transformer_block_bucketing"] | None = None
    """Graph pass that buckets SimpleFSDP communication, or None for none."""


@dataclass
class JobConfig:
    """Sections SimpleFSDP extends in the base config."""

    compile: Compile = field(default_factory=Compile)
    """Compile options."""
