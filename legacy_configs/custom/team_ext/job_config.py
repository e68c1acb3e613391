"""Team bookkeeping section for legacy TOMLs, with a nested ``[team.alerts]`` table."""

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Alerts:
    """Where and when the run notifies its owners."""

    enabled: bool = False
    """Send notifications at all."""

    channel: str = "#training-alerts"
    """Chat channel that receives the notifications."""

    severity: Literal["info", "warning", "page"] = "warning"
    """Lowest severity that is sent; ``page`` wakes the on-call person."""

    notify_on: list[str] = field(default_factory=list)
    """Events that trigger a notification, e.g. ``failure``, ``nan_loss``, ``finished``."""

    loss_spike_factor: float = 3.0
    """Alert when the loss exceeds this multiple of its running mean."""


@dataclass
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
    """The nested ``[team.alerts]`` table."""


@dataclass
class JobConfig:
    """Sections this module adds to the legacy ``JobConfig``."""

    team: Team = field(default_factory=Team)
    """The new ``[team]`` section."""
