"""``Module`` and ``BaseModel``: the config side of torch modules and of whole trainable models.

The ``nn.Module`` implementations live in torch modules named by each config's ``_owner_path``;
the configs here are plain data so registries, validation and ``--help`` never import torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from titan.config.configurable import Configurable


class Module(Configurable):
    """A torch ``nn.Module`` described by its config; only the config is defined here.

    The implementation is the class named by ``Config._owner_path`` and is imported on
    ``build()``. ``Configurable`` would make this torch-free class the owner, which would make
    ``build()`` construct the description instead of the module, so the owner is cleared.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config = cls.__dict__.get("Config")
        if isinstance(config, type) and issubclass(config, Configurable.Config):
            config._owner = None


class BaseModel(Module):
    """A whole model (decoder, diffusion transformer, ...) described by a nested config tree."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Base of a model's top-level config."""

        def update_from_config(self, *, trainer_config: Any) -> None:
            """Adopt the settings a model reads from the whole trainer config (none by default)."""

        def num_params(self) -> int | None:
            """The parameter count this config describes, when the family knows how to count."""
            return None
