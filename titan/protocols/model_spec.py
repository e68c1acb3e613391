"""``ModelSpec``: a flavor's model config plus the functions the trainer needs to train it."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from titan.config.configurable import NotBuildableError
from titan.protocols.module import BaseModel


@dataclasses.dataclass(kw_only=True, slots=True)
class ModelSpec:
    """What ``model_registry(flavor)`` returns: which model, with which hyperparameters.

    The training functions are named as ``"package.module:function"`` strings and imported only
    when the trainer asks for them, so a registry can be read without torch. A family whose
    training has not landed leaves them ``None`` and says so in ``training_status``.
    """

    name: str
    """Model family, e.g. ``"llama3"``."""
    flavor: str
    """Flavor key, e.g. ``"8B"``."""
    model: BaseModel.Config
    """The model's nested config tree (decoder, layers, attention, feed-forward, RoPE)."""
    build_loss_fn: str | None = None
    """Import path of the loss builder."""
    parallelize_fn: str | None = None
    """Import path of the function that applies FSDP/TP/AC/compile to the model."""
    pipelining_fn: str | None = None
    """Import path of the pipeline-splitting function; ``None`` when not supported."""
    post_optimizer_build_fn: str | None = None
    """Import path of a hook run after the optimizers are built; ``None`` when not needed."""
    state_dict_adapter: str | None = None
    """Import path of the HF safetensors state-dict adapter class; ``None`` when not supported."""
    training_status: str | None = None
    """Why this family cannot be trained by titan yet; ``None`` when it can."""

    def resolve(self, field: str) -> Any:
        """Import and return the function (or class) named by ``field``, or refuse clearly."""
        if self.training_status is not None:
            raise NotBuildableError(f"{self.name} {self.flavor!r}: {self.training_status}")
        path = getattr(self, field)
        if path is None:
            raise NotBuildableError(f"{self.name} {self.flavor!r} has no {field}")
        module_name, _, qualname = path.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        return target
