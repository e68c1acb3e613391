"""``BaseModel``: the config side of a trainable model.

The ``nn.Module`` implementations live in torch modules named by each config's ``_owner_path``;
the configs here are plain data so registries, validation and ``--help`` never import torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from titan.config.configurable import Configurable


class BaseModel(Configurable):
    """A whole model (decoder, diffusion transformer, ...) described by a nested config tree."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Base of a model's top-level config."""

        def update_from_config(self, *, trainer_config: Any) -> None:
            """Adopt the settings a model reads from the whole trainer config (none by default)."""

        def num_params(self) -> int | None:
            """The parameter count this config describes, when the family knows how to count."""
            return None
