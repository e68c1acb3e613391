"""Flux configs for torchtitan 0.3.0: its Flux trainer's own data loader, validator and loss.

Called by :class:`migrate.upstream._Upstream` when the legacy run used the Flux trainer:
:func:`prepare` before the keys are carried (the config objects they go into), :func:`finish`
after the model is placed (what 0.3.0 needs that no key sets).
"""

from __future__ import annotations

from typing import Any

from migrate.target import default_object


def prepare(builder: Any) -> None:
    """Flux's data loader and validator in place of the abstract and text ones."""
    from migrate.upstream_homes import cls

    builder.root.fields["dataloader"] = default_object(cls("FluxDataLoader.Config"))


def finish(builder: Any) -> None:
    """The loss upstream's Flux registries set (0.3.0's default loss config is abstract)."""
    from migrate.upstream_homes import cls

    builder.root.fields["loss"] = default_object(cls("MSELoss.Config"))
