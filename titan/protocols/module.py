"""``Module`` and ``BaseModel``: the config side of torch modules and of whole trainable models.

The ``nn.Module`` implementations live in torch modules named by each config's ``_owner_path``;
the configs here are plain data so registries, validation and ``--help`` never import torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from titan.config.configurable import Configurable


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AttentionHeads:
    """How many heads a model's attention has: what tensor parallel must split evenly."""

    n_heads: int
    """Query heads."""
    n_kv_heads: int
    """Key/value heads (equal to ``n_heads`` without grouped-query attention)."""


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

        def attention_heads(self) -> AttentionHeads | None:
            """The attention heads of every layer; None when the model has no such heads."""
            return None

        def has_moe(self) -> bool | None:
            """Whether some layer is a mixture of experts; None when the family does not say."""
            return None

        def flops_per_token(self, seq_len: int) -> int | None:
            """Training FLOPs per token at ``seq_len`` (forward and backward, active parameters
            only); None when the family does not count them, and MFU is then not reported."""
            return None
