"""Registry functions for the two custom-config-module examples in this folder.

A legacy ``job.custom_config_module`` merged its ``JobConfig`` dataclass into the schema; in the
registry world its sections become fields of a ``Trainer.Config`` subclass (new sections are new
fields, a merged section is a subclass of the section it extends), and the registry function
returns that subclass:

- ``probe_extension`` -> :class:`ProbeTrainerConfig`: a new ``probe`` section, and ``training``
  retyped to :class:`ProbeTrainingConfig` (one more key, and 20 instead of 10000 default steps);
- ``team_ext`` -> :class:`TeamTrainerConfig`: a new ``team`` section with nested ``alerts``.

The functions are named like the TOMLs (``llama3_with_probe``, ``llama3_team``): those file names
already start with their model family, so no folder prefix is added.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

# --------------------------------------------------------------------------- probe_extension


@dataclass(kw_only=True, slots=True)
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


@dataclass(kw_only=True, slots=True)
class ProbeTrainingConfig(TrainingConfig):
    """The training loop, with the probe's warmup and the extension's default step count."""

    probe_warmup_steps: int = 0
    """Steps to wait before the probe starts recording."""
    steps: int = 20
    """Number of training steps (the extension replaces the base default of 10000 by 20)."""


@dataclass(kw_only=True, slots=True)
class ProbeTrainerConfig(Trainer.Config):
    """A training run with an activation/gradient probe."""

    training: ProbeTrainingConfig = field(default_factory=ProbeTrainingConfig)
    """Batch, sequence length, steps and precision, plus the probe's warmup."""
    probe: Probe = field(default_factory=Probe)
    """What the probe records, where and how often."""


# --------------------------------------------------------------------------- team_ext


@dataclass(kw_only=True, slots=True)
class Alerts:
    """Where and when the run notifies its owners."""

    enabled: bool = False
    """Send notifications at all."""
    channel: str = "#training-alerts"
    """Chat channel that receives the notifications."""
    severity: Literal["info", "warning", "page"] = "warning"
    """Lowest severity that is sent; page wakes the on-call person."""
    notify_on: list[str] = field(default_factory=list)
    """Events that trigger a notification, e.g. failure, nan_loss, finished."""
    loss_spike_factor: float = 3.0
    """Alert when the loss exceeds this multiple of its running mean."""


@dataclass(kw_only=True, slots=True)
class Team:
    """Who owns the run and how it is accounted."""

    name: str = "unassigned"
    """Team that owns the run."""
    owner: str = ""
    """Person to contact about the run."""
    cost_center: int = 0
    """Accounting code the GPU hours are booked to."""
    tags: list[str] = field(default_factory=list)
    """Free-form labels copied into the experiment tracker."""
    alerts: Alerts = field(default_factory=Alerts)
    """Notifications to the owners."""


@dataclass(kw_only=True, slots=True)
class TeamTrainerConfig(Trainer.Config):
    """A training run tracked by its owning team."""

    team: Team = field(default_factory=Team)
    """Ownership, accounting and alerting of the run."""


# --------------------------------------------------------------------------- registry functions


def llama3_with_probe() -> ProbeTrainerConfig:
    """Llama 3 debug training with activation probe

    The llama3 debug model with the probe recording activations of the first block, the last
    block and the final norm. The step count is the extension's default (20).
    """
    return ProbeTrainerConfig(
        description="Llama 3 debug training with activation probe",
        model_spec=model_registry("debugmodel"),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2),
        training=ProbeTrainingConfig(probe_warmup_steps=5),
        probe=Probe(
            mode="activations",
            every_n_steps=5,
            modules=["layers.0", "layers.5", "norm"],
            max_abs_threshold=5000.0,
            output_dir="probe_stats",
        ),
    )


def llama3_team() -> TeamTrainerConfig:
    """Llama 3 debug training, team-tracked

    The llama3 debug model, 10 steps on ``c4_test``, owned by the pretraining-infra team; a
    nightly job, so alerts page someone.
    """
    return TeamTrainerConfig(
        description="Llama 3 debug training, team-tracked",
        model_spec=model_registry("debugmodel"),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=10),
        team=Team(
            name="pretraining-infra",
            owner="jdoe",
            cost_center=4217,
            tags=["llama3", "debug", "nightly"],
            alerts=Alerts(
                enabled=True,
                channel="#pt-infra-alerts",
                severity="page",
                notify_on=["failure", "nan_loss"],
                loss_spike_factor=2.5,
            ),
        ),
    )
