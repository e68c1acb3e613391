"""titan's config classes as the migrator sees them: class paths, import names and defaults.

The data lives in the generated ``migrate/target_spec.py`` (see ``migrate/target_codegen.py``),
written in the types of ``migrate/target_types.py``; this module gives the values a plan is made of
and the one operation the plan needs: the default object of a class, fully built out
(:func:`default_object`).

A plan's config objects are :class:`Obj` values: a class path and the value of every field, where
a value is a literal, a list, an :class:`Obj` or a :class:`RegistryCall`. They are compared
strictly (``1`` is not ``1.0``, a ``nan`` equals a ``nan``), because a migration that turned an
int into a float would change a run.
"""

from __future__ import annotations

from typing import Any

from migrate.target_spec import CLASSES
from migrate.target_types import ClassInfo, Default
from schemas._frozen import Frozen, _set


class Obj:
    """A config object in a plan: its class path and every field's value."""

    __slots__ = ("cls", "fields")

    def __init__(self, cls: str, fields: dict[str, Any]) -> None:
        self.cls = cls
        self.fields = fields

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Obj):
            return NotImplemented
        return self.cls == other.cls and same(self.fields, other.fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Obj({self.cls!r}, {self.fields!r})"

    def get(self, path: str) -> Any:
        """The value at a dotted path below this object."""
        node: Any = self
        for part in path.split("."):
            node = node.fields[part]
        return node


class RegistryCall(Frozen):
    """``model_registry(flavor)`` of a model family: how a plan names the model."""

    __slots__ = ("family", "flavor", "module")
    __match_args__ = ()

    family: str
    """The family's name (``llama3``; a user's own family: its legacy ``model.name``)."""
    flavor: str
    module: str | None
    """The user's package that defines ``model_registry`` for a family titan does not ship
    (declared in ``[tool.titan] model-registries`` or with ``--model-registry``); ``None`` for
    titan's own ``titan.models.<family>``."""

    def __init__(self, family: str, flavor: str, module: str | None = None) -> None:
        _set(self, "family", family)
        _set(self, "flavor", flavor)
        _set(self, "module", module)

    @property
    def package(self) -> str:
        """The module ``model_registry`` is imported from."""
        return self.module or f"titan.models.{self.family}"


class UnsupportedModel(Frozen):
    """A legacy model titan has no family for (``vlm``): recorded by name, not trainable."""

    __slots__ = ("name", "flavor")
    __match_args__ = ()

    name: str
    flavor: str

    def __init__(self, name: str, flavor: str) -> None:
        _set(self, "name", name)
        _set(self, "flavor", flavor)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (``nan`` equals ``nan``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Obj):
        return a == b
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def known(cls: str) -> bool:
    return cls in CLASSES or cls in _extra


def info(cls: str) -> ClassInfo:
    """The :class:`ClassInfo` of a class path (``KeyError`` for a class titan does not have)."""
    return _extra.get(cls) or CLASSES[cls]


_extra: dict[str, ClassInfo] = {}
"""Classes a plan generates (custom config modules), registered by :func:`register`."""


def register(cls: str, class_info: ClassInfo) -> None:
    """Make a generated class known to :func:`default_object` (idempotent for equal infos)."""
    _extra[cls] = class_info


def default_object(cls: str) -> Obj:
    """A fresh, fully built default object of ``cls``."""
    class_info = info(cls)
    return Obj(cls, {name: _build(value) for name, value in class_info.defaults.items()})


def changed_fields(obj: Obj) -> dict[str, Any]:
    """The fields of ``obj`` that differ from its class' defaults, in field order: what both
    renderers pass to the constructor."""
    defaults = default_object(obj.cls).fields
    return {name: value for name, value in obj.fields.items() if not same(value, defaults[name])}


def _build(value: Any) -> Any:
    if isinstance(value, Default):
        obj = default_object(value.cls)
        for name, changed in value.changed.items():
            obj.fields[name] = _build(changed)
        return obj
    if isinstance(value, list):
        return [_build(v) for v in value]
    if isinstance(value, dict):
        return {k: _build(v) for k, v in value.items()}
    return value
