"""What an undated file's run depends on: the defaults and flavors its era would decide.

A file with no key, table or value older than v0.2.2 is read as v0.2.2 (``date_file``). That is
only a guess: its keys say when it was written *at the earliest* (each key's first day, the
family and flavor it names), not that it was written for v0.2.2. A v0.2.1 file whose keys are all
still v0.2.2 keys ran with v0.2.1's defaults (``activation_checkpoint.preserve_rng_state`` was
``false`` until e347b1e5, 2026-02-15), and with v0.2.1's flavors. :func:`stakes` lists what would
change between the earliest day the file allows and v0.2.2: the old defaults (``era_flips``)
that would apply to this file on some day of that span, and the flavor changes
(``era_flavors``). A file with none is as good as v0.2.2; one with some is *undated*, and the
migration says so and never calls it lossless until ``--era`` (or ``[tool.titan] era``) settles it.
"""

from __future__ import annotations

from titan.schemas._frozen import Frozen, _set
from titan.schemas.era_clues import ERA_START, V022
from titan.schemas.era_defaults import EraDefault, EraGuess, clues, era_defaults, model_clues
from titan.schemas.era_flavors import FlavorChange
from titan.schemas.era_flips import FLIPS
from titan.schemas.eras import leaves


class Stakes(Frozen):
    """The era choices an undated file's run depends on."""

    __slots__ = ("floor", "defaults", "flavor")
    __match_args__ = ("floor",)

    floor: str
    """The earliest day the file's keys, family and flavor allow."""
    defaults: tuple[EraDefault, ...]
    """Old defaults the file would have had on some day from :attr:`floor` to v0.2.2, one per
    key (the earliest that applies)."""
    flavor: tuple[FlavorChange, ...]
    """Changes of the file's flavor that still held on some day from :attr:`floor` on."""

    def __init__(
        self, floor: str, defaults: tuple[EraDefault, ...], flavor: tuple[FlavorChange, ...]
    ) -> None:
        _set(self, "floor", floor)
        _set(self, "defaults", defaults)
        _set(self, "flavor", flavor)

    @property
    def any(self) -> bool:
        """Whether the era would change anything of this file's run."""
        return bool(self.defaults or self.flavor)

    def keys(self) -> list[str]:
        """The settings at stake, as the report lists them."""
        found = [d.key for d in self.defaults]
        if self.flavor:
            found.append("model.flavor")
        return found


def stakes(document: dict, guess: EraGuess) -> Stakes | None:
    """What the era of ``document`` would decide, when nothing in it is older than v0.2.2
    (``guess.current``); ``None`` for a file its own keys date (it is not undated)."""
    if not guess.current:
        return None
    found = clues(document, leaves(document)) + model_clues(document)
    floor = max((clue.since for clue in found), default=ERA_START)
    days = sorted(
        {max(floor, f.since) for f in FLIPS if f.until > floor and max(floor, f.since) < V022}
    )
    defaults: dict[str, EraDefault] = {}
    for day in days:
        for default in era_defaults(document, day):
            defaults.setdefault(default.key, default)
    return Stakes(floor, tuple(defaults.values()), _flavor_stakes(document, floor))


def _flavor_stakes(document: dict, floor: str) -> tuple[FlavorChange, ...]:
    """The changes of the flavor the file names that a day from ``floor`` on may have had."""
    from titan.schemas.flavor_eras import at_stake

    model = document.get("model") if isinstance(document.get("model"), dict) else {}
    name, flavor = model.get("name", "llama3"), model.get("flavor", "debugmodel")
    if not isinstance(name, str) or not isinstance(flavor, str):
        return ()
    return at_stake(name, flavor, floor)
