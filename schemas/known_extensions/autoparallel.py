"""Built-in copy of ``torchtitan.experiments.autoparallel.job_config`` at v0.2.2."""

from dataclasses import dataclass, field


@dataclass
class Experimental:
    """AutoParallel additions to ``[experimental]``."""

    comms_bucket_reorder_strategy: str = "aten"
    """Communication bucketing/reordering strategy: "aten", "inductor" or "none"."""
    autop_force_bf16: bool = False
    """Force bfloat16 in AutoParallel."""


@dataclass
class JobConfig:
    """Sections AutoParallel extends in the base config."""

    experimental: Experimental = field(default_factory=Experimental)
    """Experimental options."""
