"""Built-in copy of ``tests.assets.extended_job_config_example`` (torchtitan's test example)."""

from dataclasses import dataclass, field


@dataclass
class CustomConfig:
    """An example section added by a custom config module."""

    how_is_your_day: str = "good"
    """Just an example help text."""
    num_days: int = 7
    """Number of days in a week."""


@dataclass
class Training:
    """Example additions to ``[training]``."""

    steps: int = 99
    """Overrides the base config's default of training.steps."""
    my_custom_steps: int = 32
    """An example field added to an existing section."""


@dataclass
class JobConfig:
    """An example of how to extend the config with custom sections."""

    custom_config: CustomConfig = field(default_factory=CustomConfig)
    """The example section."""
    training: Training = field(default_factory=Training)
    """Example training options."""
