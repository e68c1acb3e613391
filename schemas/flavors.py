"""The families titan ships and the facts of every flavor they define, as plain data.

``model.flavor`` is only a key into a family's flavor table, and a trainer finds out a key is
wrong (or that TP does not divide the head count, or that EP was asked of a dense model) only
after it has imported torch and started building. This module lets the validator and the migrator
make the same checks without torch.

The data is generated (``schemas/flavor_table.py``, by ``make schema``) from the family records in
``titan/models/<family>/family.py``, whose flavors are every flavor of torchtitan v0.2.2 (the
``torchtitan==0.2.2`` wheel, tag ``v0.2.2``, commit ``73a0e6979dd10b6b1904098eb3c8f62c18ab87ce``)
with its numbers. The routing dicts are shared: treat them as read-only.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.flavor_table import FAMILY_TABLE, FLAVOR_TABLE


class Flavor(Frozen):
    """One flavor of a family: the facts of its model the checks read."""

    __slots__ = (
        "family",
        "name",
        "n_heads",
        "n_kv_heads",
        "n_layers",
        "attn_type",
        "moe",
        "routing",
    )
    __match_args__ = ()

    family: str
    """TrainSpec name the flavor belongs to, e.g. ``"llama3"`` (aliases already resolved)."""
    name: str
    """Flavor key as written in ``model.flavor``, e.g. ``"8B"``."""
    n_heads: int | None
    """Attention (query) heads; ``None`` where a family has no such notion."""
    n_kv_heads: int | None
    """Key/value heads after torchtitan's defaulting; equal to ``n_heads`` without GQA."""
    n_layers: int | None
    """Transformer layers of a decoder (what a pipeline splits); ``None`` for other models."""
    attn_type: str
    """The attention v0.2.2 ran: ``"sdpa"``, ``"flex"`` or ``"varlen"``."""
    moe: bool
    """Whether at least one layer is a mixture-of-experts layer, so expert parallelism applies."""
    routing: dict[str, Any] | None
    """How the MoE layers route: ``num_experts``, ``top_k``, ``num_expert_groups``,
    ``num_limited_groups``; ``None`` for a model without them."""

    def __init__(self, *, family: str, name: str, **facts: Any) -> None:
        _set(self, "family", family)
        _set(self, "name", name)
        for fact in self.__slots__[2:]:
            _set(self, fact, facts[fact])


FLAVORS: dict[str, dict[str, Flavor]] = {
    family: {name: Flavor(family=family, name=name, **row) for name, row in table.items()}
    for family, table in FLAVOR_TABLE.items()
}
"""family -> flavor name -> Flavor, in torchtitan's own order."""

FAMILY_ALIASES: dict[str, str] = {
    alias: family for family, row in FAMILY_TABLE.items() for alias in row["aliases"]
}
"""``model.name`` values whose TrainSpec reuses another family's flavors (each family's record
names its own)."""

MODEL_CONFIGS: dict[str, str] = {
    family: row["model_config"] for family, row in FAMILY_TABLE.items()
}
"""Each family's model config class, as generated registry code imports it
(``titan.models.llama3:Llama3Model.Config``)."""

MODEL_TRAINERS: dict[str, str] = {
    name: trainer for row in FAMILY_TABLE.values() for name, trainer in row["trainers"].items()
}
"""``model.name`` values (a family's or an alias) whose configs need a trainer subclass -> its
config class (``titan.models.flux.trainer:FluxTrainer.Config``)."""


def flavor(family: str, name: str) -> Flavor | None:
    """The flavor ``name`` of ``family`` (aliases resolved), or ``None`` if either is unknown."""
    return FLAVORS.get(FAMILY_ALIASES.get(family, family), {}).get(name)


def flavor_names(family: str) -> tuple[str, ...] | None:
    """The flavor names of ``family`` (aliases resolved), or ``None`` for an unknown family
    (a ``model.name`` that is not a string too: its wrong type is reported where it is read)."""
    if not isinstance(family, str):
        return None
    table = FLAVORS.get(FAMILY_ALIASES.get(family, family))
    return None if table is None else tuple(table)
