"""The two value types titan's config classes are described in, as the migrator sees them.

``migrate/targets/titan_spec.py`` (generated) is written in these;
``migrate/targets/config_objects.py`` reads that table. They live apart from both so that the
generated table and its reader do not import each other.
"""

from __future__ import annotations

import importlib
from typing import Any

from titan.schemas._frozen import Frozen, _set


def load_class(path: str) -> Any:
    """The class a spec row's ``module:Qual.Name`` path names (imported: the live renderer and
    the spec generators call it, never the plan)."""
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


class ClassInfo(Frozen):
    """One titan config class: where to import it from and the defaults of its fields."""

    __slots__ = ("module", "owner", "qualname", "defaults")
    __match_args__ = ()

    module: str
    """The package to import ``owner`` from (``titan.config``)."""
    owner: str
    """The outermost name to import (``CheckpointManager`` for ``CheckpointManager.Config``)."""
    qualname: str
    """How code names the class once ``owner`` is imported (``CheckpointManager.Config``)."""
    defaults: dict[str, Any]
    """Field -> default; config-object defaults are :class:`Default` values."""

    def __init__(self, module: str, owner: str, qualname: str, defaults: dict[str, Any]) -> None:
        _set(self, "module", module)
        _set(self, "owner", owner)
        _set(self, "qualname", qualname)
        _set(self, "defaults", defaults)


class Default(Frozen):
    """A default that is a config object: its class and the fields that differ from that class'
    own defaults (``FluxValidator.Config``'s data loader sets ``generate_timesteps=True``)."""

    __slots__ = ("cls", "changed")
    __match_args__ = ()

    cls: str
    changed: dict[str, Any]

    def __init__(self, cls: str, changed: dict[str, Any]) -> None:
        _set(self, "cls", cls)
        _set(self, "changed", changed)


class Required(Frozen):
    """The default of a field the class has none for (``ParamGroupConfig.pattern``): a plan must
    set it, and the code renderer always writes it."""

    __slots__ = ()
    __match_args__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Required)

    def __hash__(self) -> int:
        return hash("REQUIRED")


REQUIRED = Required()


class FamilyInfo(Frozen):
    """A model family of a target trainer: where its ``model_registry`` lives, the flavors it
    registers and the keyword parameters of ``model_registry`` with their defaults."""

    __slots__ = ("module", "flavors", "params")
    __match_args__ = ()

    module: str
    """The package that exports ``model_registry`` (``torchtitan.models.llama3``)."""
    flavors: tuple[str, ...]
    params: dict[str, Any]
    """Keyword parameter -> default (:data:`REQUIRED` where it has none), flavor excluded."""

    def __init__(self, module: str, flavors: tuple[str, ...], params: dict[str, Any]) -> None:
        _set(self, "module", module)
        _set(self, "flavors", flavors)
        _set(self, "params", params)
