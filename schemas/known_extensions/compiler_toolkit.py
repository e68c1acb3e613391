"""Built-in copy of ``torchtitan.experiments.compiler_toolkit.job_config`` at v0.2.2."""

from dataclasses import dataclass, field


@dataclass
class Compile:
    """Compiler toolkit additions to ``[compile]``."""

    joint_passes: list[str] = field(default_factory=list)
    """Names of the passes applied to the joint forward-backward graph."""
    passes: list[str] = field(default_factory=list)
    """Names of the compiler passes applied in the compiler toolkit workflow."""


@dataclass
class JobConfig:
    """Sections the compiler toolkit extends in the base config."""

    compile: Compile = field(default_factory=Compile)
    """Compile options."""
