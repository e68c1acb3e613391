"""The flavor eras applied: what ``model.flavor`` built on the day a legacy file was written.

:mod:`titan.schemas.era_flavors` lists each difference between a flavor's v0.2.2 definition and
an older one, with its commit. :func:`flavor_at` gathers those in force on one day for one flavor:
the values that era's model had (only where they differ from the v0.2.2 flavor titan builds,
``schemas/flavor_configs.py``), what titan cannot say of it, and the fields the era took from the
tokenizer. :func:`at_stake` lists the changes a file of unknown date may have been built with, and
:func:`first_day` is the day a flavor name came to exist (a file naming it is no older).

The migrator writes :attr:`EraFlavor.sets` into the generated config (``model_spec.model.<path>
= value``), so the model built is the one that era built; the validator reports what the v0.2.2
form of the file would change.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.era_flavors import FLAVOR_ADDED, FLAVOR_CHANGES, FlavorChange, FromTokenizer
from titan.schemas.flavors import FAMILY_ALIASES, Flavor


class EraFlavor(Frozen):
    """One flavor as an older torchtitan defined it, against titan's v0.2.2 definition."""

    __slots__ = ("family", "flavor", "day", "changes", "sets", "lost", "tokenizer")
    __match_args__ = ("family", "flavor")

    family: str
    """The family (aliases resolved)."""
    flavor: str
    """The flavor name as the file writes it."""
    day: str
    """The day (``YYYY-MM-DD``) the file is dated to."""
    changes: tuple[FlavorChange, ...]
    """Every change in force that day, oldest commit first."""
    sets: dict[str, Any]
    """Model-config path -> the era's value, where it differs from v0.2.2's."""
    lost: tuple[FlavorChange, ...]
    """Changes in force that titan's config cannot say."""
    tokenizer: tuple[str, ...]
    """Paths whose value the era took from the tokenizer the run loaded."""

    def __init__(
        self,
        *,
        family: str,
        flavor: str,
        day: str,
        changes: tuple[FlavorChange, ...],
        sets: dict[str, Any],
        lost: tuple[FlavorChange, ...],
        tokenizer: tuple[str, ...],
    ) -> None:
        _set(self, "family", family)
        _set(self, "flavor", flavor)
        _set(self, "day", day)
        _set(self, "changes", changes)
        _set(self, "sets", sets)
        _set(self, "lost", lost)
        _set(self, "tokenizer", tokenizer)

    @property
    def differs(self) -> bool:
        """Whether the era's model is not v0.2.2's."""
        return bool(self.sets or self.lost or self.tokenizer)

    def change_of(self, path: str) -> FlavorChange:
        """The change that gives ``path`` its era value (the latest, where several do)."""
        return [c for c in self.changes if path in c.sets][-1]


def family_of(name: str) -> str:
    """The family a legacy ``model.name`` builds (``llama3_ft`` builds llama3's flavors)."""
    return FAMILY_ALIASES.get(name, name)


def first_day(family: str, flavor: str | None = None) -> tuple[str, str, str] | None:
    """``(day, commit, pr)`` of the first day ``flavor`` of ``family`` (``None``: the family
    itself) built a model on torchtitan main; ``None`` when the table does not say."""
    return FLAVOR_ADDED.get((family_of(family), flavor))


def v022_value(family: str, flavor: str, path: str) -> Any:
    """The value titan's v0.2.2 definition of the flavor has at ``path`` (``KeyError`` if none)."""
    return _configs()[family_of(family)][flavor][path]


def _configs() -> dict[str, dict[str, dict[str, Any]]]:
    """The generated table of every flavor's fields, read only when an era asks for it."""
    from titan.schemas.flavor_configs import FLAVOR_CONFIGS

    return FLAVOR_CONFIGS


def _start(change: FlavorChange, flavor: str) -> str:
    """The first day ``change`` held for ``flavor``: its own, or the flavor's first day."""
    added = first_day(change.family, flavor)
    return max(change.since, added[0]) if added is not None else change.since


def changes_of(family: str, flavor: str) -> tuple[FlavorChange, ...]:
    """Every change of the flavor's definition the table holds, oldest end first."""
    family = family_of(family)
    found = [c for c in FLAVOR_CHANGES if c.family == family and flavor in c.flavors]
    return tuple(sorted(found, key=lambda c: (c.until, c.commit)))


def flavor_at(family: str, flavor: str, day: str) -> EraFlavor:
    """The flavor as torchtitan main defined it on ``day`` (``YYYY-MM-DD``), as differences from
    titan's v0.2.2 definition (none for a flavor that did not change, or that titan lacks)."""
    family = family_of(family)
    inforce = tuple(c for c in changes_of(family, flavor) if _start(c, flavor) <= day < c.until)
    sets: dict[str, Any] = {}
    tokenizer: list[str] = []
    for change in inforce:
        for path, value in change.sets.items():
            if isinstance(value, FromTokenizer):
                tokenizer.append(path)
            elif not _same(value, v022_value(family, flavor, path)):
                sets[path] = value
    return EraFlavor(
        family=family,
        flavor=flavor,
        day=day,
        changes=inforce,
        sets=sets,
        lost=tuple(c for c in inforce if c.lost),
        tokenizer=tuple(tokenizer),
    )


def at_stake(family: str, flavor: str, floor: str) -> tuple[FlavorChange, ...]:
    """The changes a file written on or after ``floor`` (and undated otherwise) may have been
    built with: those that still held on some day from ``floor`` on."""
    return tuple(c for c in changes_of(family, flavor) if c.until > max(floor, _start(c, flavor)))


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type (``1`` is not ``1.0``; tuples and lists are sequences)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_FACTS = {
    "layer.attention.n_heads": "n_heads",
    "layer.attention.n_kv_heads": "n_kv_heads",
    "n_layers": "n_layers",
    "layer.attention.attn_type": "attn_type",
    "num_heads": "n_heads",  # flux
}
"""Model-config paths the cross-field rules read, as :class:`~titan.schemas.flavors.Flavor`
facts (the routing fields are ``layer.moe.<name>``)."""


def facts_at(found: Flavor, day: str) -> Flavor:
    """The rules' facts of a flavor (``titan.schemas.flavors``) as it was on ``day``: its heads,
    layers and experts where that era's definition differs."""
    sets = flavor_at(found.family, found.name, day).sets
    if not sets:
        return found
    facts = {name: getattr(found, name) for name in Flavor.__slots__[2:]}
    for path, fact in _FACTS.items():
        if path in sets:
            facts[fact] = sets[path]
    if facts["n_heads"] != found.n_heads and found.n_kv_heads == found.n_heads:
        if "layer.attention.n_kv_heads" not in sets:
            facts["n_kv_heads"] = facts["n_heads"]  # no grouped queries: one kv head per head
    if found.routing is not None:
        routing = dict(found.routing)
        for name in routing:
            if f"layer.moe.{name}" in sets:
                routing[name] = sets[f"layer.moe.{name}"]
        facts["routing"] = routing
    return Flavor(family=found.family, name=found.name, **facts)
