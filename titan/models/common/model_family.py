"""``ModelFamily``: everything titan knows about one model family, declared in its own folder.

A family is a package ``titan/models/<name>/`` whose ``family.py`` holds ``FAMILY``, one
:class:`ModelFamily`. That file is the only place that names the family: titan's list of
families is the list of such folders (``titan.models.family_names``), and the torch-free table the
validator and the migrator read (``titan.schemas.flavor_table``) is generated from the records.
Adding a family is adding its folder (then ``make schema``)::

    titan/models/<name>/
        family.py        FAMILY = ModelFamily(name=..., flavors=..., capabilities=..., ...)
        __init__.py      def model_registry(flavor): return FAMILY.model_spec(flavor)
        flavors.py       flavor name -> config factory
        model_config.py  the config classes; model.py, parallelize.py, ... the torch code

A record is plain data (no torch): reading one imports the family's config classes only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from titan.models.common.registry import flavor_model_spec
from titan.protocols.model_spec import Capabilities, ModelSpec
from titan.protocols.module import BaseModel


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ModelFamily:
    """One model family: its names, its flavors, what titan-train runs for it, and with what."""

    name: str
    """The family's ``model.name``, as torchtitan names it (``"llama3"``); its package's name."""
    flavors: Mapping[str, Callable[[], BaseModel.Config]]
    """Flavor name -> a factory of that flavor's model config tree, in torchtitan's order."""
    model_config: type[BaseModel.Config]
    """The class every flavor's config is (what ``model_registry(flavor).model`` is), exported by
    the family's package under its own qualified name."""
    capabilities: Capabilities
    """What titan-train can run for the family (``ModelSpec.refusals`` reads it)."""
    aliases: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    """Other legacy ``model.name`` values that build this family's flavors -> the trainer config
    class (``module:Qualname``) such a config needs, ``None`` for the family's own."""
    trainer: str | None = None
    """The trainer config class (``module:Qualname``) the family's configs need, where it is not
    titan's base trainer."""
    build_loss_fn: str | None = None
    """Import path of the loss builder; ``None`` where training has not landed."""
    parallelize_fn: str | None = None
    """Import path of the function that applies FSDP/TP/AC/compile to the model."""
    pipelining_fn: str | None = None
    """Import path of the function that splits the model into pipeline stages."""
    post_optimizer_build_fn: str | None = None
    """Import path of the hook run once the optimizers exist (MoE load balancing)."""
    state_dict_adapter: str | None = None
    """Import path of the Hugging Face state-dict adapter class (``module:Class``)."""

    @property
    def model_config_path(self) -> str:
        """``model_config`` as the generated registry code imports it: from the family's package
        (``titan.models.llama3:Llama3Model.Config``)."""
        return f"{__package__.rpartition('.')[0]}.{self.name}:{self.model_config.__qualname__}"

    def trainers(self) -> dict[str, str]:
        """``model.name`` -> the trainer config class it needs, for the names that need one."""
        own = {self.name: self.trainer} if self.trainer else {}
        aliased = {alias: trainer or self.trainer for alias, trainer in self.aliases.items()}
        return {**own, **{alias: t for alias, t in aliased.items() if t}}

    def model_spec(self, flavor: str) -> ModelSpec:
        """A fresh ``ModelSpec`` of ``flavor``; ``ValueError`` naming the flavors if unknown."""
        return flavor_model_spec(
            self.name,
            flavor,
            flavors=self.flavors,
            capabilities=dataclasses.replace(self.capabilities),
            build_loss_fn=self.build_loss_fn,
            parallelize_fn=self.parallelize_fn,
            pipelining_fn=self.pipelining_fn,
            post_optimizer_build_fn=self.post_optimizer_build_fn,
            state_dict_adapter=self.state_dict_adapter,
        )
