"""Legacy ``custom_config_module`` example: an activation/gradient probe.

Loaded by v0.2.2's ``ConfigManager`` as ``custom_config_module = "probe_extension"`` (this folder
must be on ``sys.path``). Its ``JobConfig`` is merged into the base schema: ``[probe]`` is a new
section, ``[training]`` gains ``probe_warmup_steps`` and gets a different default for ``steps``.
"""

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Probe:
    """Record statistics of selected modules while training."""

    mode: Literal["off", "activations", "gradients"] = "off"
    """What to record: nothing, forward activations, or parameter gradients."""

    every_n_steps: int = 50
    """Record on every N-th training step."""

    modules: list[str] = field(default_factory=lambda: ["layers.0"])
    """Module FQN prefixes to attach the probe to."""

    max_abs_threshold: float = 1e4
    """Log a warning when a recorded tensor's max absolute value exceeds this."""

    output_dir: str | None = None
    """Sub-folder of dump_folder for the recorded statistics; None keeps them in the log only."""


@dataclass
class Training:
    """Additions to the base ``[training]`` section."""

    probe_warmup_steps: int = 0
    """Steps to wait before the probe starts recording."""

    steps: int = 20
    """Number of training steps (the base default of 10000 is replaced by 20)."""


@dataclass
class JobConfig:
    """Sections this module adds to or changes in the legacy ``JobConfig``."""

    probe: Probe = field(default_factory=Probe)
    """The new ``[probe]`` section."""

    training: Training = field(default_factory=Training)
    """Merged field by field into the base ``[training]`` section."""
