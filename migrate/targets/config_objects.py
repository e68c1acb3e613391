"""titan's config classes as the migrator sees them: class paths, import names and defaults.

The data lives in the generated ``migrate/targets/titan_spec.py`` (see
``migrate/specgen/target_codegen.py``), written in the types of ``migrate/targets/spec_types.py``;
this module gives the values a plan is made of and the one operation the plan needs: the default
object of a class, fully built out (:func:`default_object`).

A plan's config objects are :class:`Obj` values: a class path and the value of every field, where
a value is a literal, a list, an :class:`Obj` or a :class:`RegistryCall`. They are compared
strictly (``1`` is not ``1.0``, a ``nan`` equals a ``nan``), because a migration that turned an
int into a float would change a run.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.targets.spec_types import ClassInfo, Default
from titan.migrate.targets.titan_spec import CLASSES
from titan.schemas._frozen import Frozen, _set


class Obj:
    """A config object in a plan: its class path and every field's value."""

    __slots__ = ("cls", "fields", "shown")

    def __init__(self, cls: str, fields: dict[str, Any]) -> None:
        self.cls = cls
        self.fields = fields
        self.shown: frozenset[str] = frozenset()
        """Fields the code writes even at their default, where the target's own registries
        always spell them out (upstream's ``dataset=``)."""

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

    __slots__ = ("family", "flavor", "module", "kwargs", "model", "edits")
    __match_args__ = ()

    family: str
    """The family's name (``llama3``; a user's own family: its legacy ``model.name``)."""
    flavor: str
    module: str | None
    """The package that defines ``model_registry`` when it is not titan's own
    ``titan.models.<family>``: a user's family (declared in ``[tool.titan] model-registries`` or
    with ``--model-registry``), or another trainer's (``torchtitan.models.llama3``)."""
    kwargs: dict[str, Any]
    """Further arguments (``attn_backend``, ``converters``), in the order they are passed."""
    model: Obj | None
    """The fields a custom config module adds to ``[model]``: an object of the generated
    subclass of the family's model config. The spec's model config is re-made as that subclass
    (``titan.models.extend_model``), so the fork's model code reads them from its config."""
    edits: tuple[ModelEdit, ...]
    """Fields of the built model config set afterwards (``model_spec.model.rope.scaling =
    "none"``): the flavor as the file's era defined it (``titan.schemas.flavor_eras``)."""

    def __init__(
        self,
        family: str,
        flavor: str,
        module: str | None = None,
        kwargs: dict[str, Any] | None = None,
        model: Obj | None = None,
        edits: tuple[ModelEdit, ...] = (),
    ) -> None:
        _set(self, "family", family)
        _set(self, "flavor", flavor)
        _set(self, "module", module)
        _set(self, "kwargs", dict(kwargs or {}))
        _set(self, "model", model)
        _set(self, "edits", tuple(edits))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegistryCall):
            return NotImplemented
        mine = (self.family, self.flavor, self.module)
        return mine == (other.family, other.flavor, other.module) and same(
            (self.kwargs, self.model, self.edits), (other.kwargs, other.model, other.edits)
        )

    def without_edits(self) -> RegistryCall:
        """The same call with no fields set afterwards."""
        return RegistryCall(self.family, self.flavor, self.module, self.kwargs, self.model)

    def __hash__(self) -> int:
        return hash((self.family, self.flavor, self.module))

    @property
    def package(self) -> str:
        """The module ``model_registry`` is imported from."""
        return self.module or f"titan.models.{self.family}"


class ModelEdit(Frozen):
    """One field of a model config set after ``model_registry`` built it, and why."""

    __slots__ = ("path", "value", "why", "each", "means")
    __match_args__ = ("path", "value")

    path: str
    """The field's dotted path below the model config (``rope.scaling``), or below each item of
    :attr:`each`."""
    value: Any
    """A literal."""
    why: str
    """The comment the generated code writes above the assignment."""
    each: str | None
    """A list below the model config whose every item gets the field (torchtitan 0.3.0's
    per-layer configs: ``layers``); ``None`` for one field of the model config."""
    means: str
    """The titan model-config path the edit carries (the flavor era's field): :attr:`path` for
    titan's own configs."""

    def __init__(
        self,
        path: str,
        value: Any,
        why: str,
        *,
        each: str | None = None,
        means: str | None = None,
    ) -> None:
        _set(self, "path", path)
        _set(self, "value", value)
        _set(self, "why", why)
        _set(self, "each", each)
        _set(self, "means", path if means is None else means)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelEdit):
            return NotImplemented
        mine, theirs = (self.path, self.each), (other.path, other.each)
        return mine == theirs and same(self.value, other.value)

    def __hash__(self) -> int:
        return hash(self.path)


class Call(Frozen):
    """A call of a function a target provides (``default_adamw(lr=8e-4)``), where the target's
    own registries write one instead of spelling out the object it returns."""

    __slots__ = ("module", "name", "args", "kwargs")
    __match_args__ = ()

    module: str
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def __init__(
        self,
        module: str,
        name: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        _set(self, "module", module)
        _set(self, "name", name)
        _set(self, "args", tuple(args))
        _set(self, "kwargs", dict(kwargs or {}))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Call):
            return NotImplemented
        return (self.module, self.name) == (other.module, other.name) and same(
            (self.args, self.kwargs), (other.args, other.kwargs)
        )

    def __hash__(self) -> int:
        return hash((self.module, self.name))


class Local(Frozen):
    """A name the registry function assigns before building its config (``model_spec``):
    :attr:`titan.migrate.plan.migration_plan.Plan.locals` holds its value."""

    __slots__ = ("name",)
    __match_args__ = ()

    name: str

    def __init__(self, name: str) -> None:
        _set(self, "name", name)


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
    return cls in CLASSES or cls in _extra or cls in _other_targets()


def info(cls: str) -> ClassInfo:
    """The :class:`ClassInfo` of a class path: titan's, a generated one, or one of another
    target trainer's (``KeyError`` for a class none of them has)."""
    found = _extra.get(cls) or CLASSES.get(cls)
    return found if found is not None else _other_targets()[cls]


def _other_targets() -> dict[str, ClassInfo]:
    """The config classes of the other trainers a plan can be written for, loaded on first use
    (their class paths never collide with titan's: they start with the trainer's package)."""
    if not _targets:
        from titan.migrate.targets.upstream_spec_030 import CLASSES as UPSTREAM_030

        _targets.update(UPSTREAM_030)
    return _targets


_targets: dict[str, ClassInfo] = {}


_extra: dict[str, ClassInfo] = {}
"""Classes a plan generates (custom config modules), registered by :func:`register`."""


def register(cls: str, class_info: ClassInfo) -> None:
    """Make a generated class known to :func:`default_object` (idempotent for equal infos)."""
    _extra[cls] = class_info


def outside_class(cls: str) -> str:
    """Make a class titan does not describe known by its path (``package.module:Owner.Config``),
    with no field defaults: a user's converter config or a model config whose fields come from
    its ``model_registry``. A plan sets none of its fields, so nothing of the class is imported
    to know them; the renderers write ``Owner.Config()`` (and its import) as they do for titan's."""
    module, _, qualname = cls.partition(":")
    if cls not in CLASSES and cls not in _extra:
        _extra[cls] = ClassInfo(module, qualname.partition(".")[0], qualname, {})
    return cls


def default_object(cls: str) -> Obj:
    """A fresh, fully built default object of ``cls``."""
    class_info = info(cls)
    return Obj(cls, {name: _build(value) for name, value in class_info.defaults.items()})


def changed_fields(obj: Obj) -> dict[str, Any]:
    """The fields of ``obj`` that differ from its class' defaults, in field order: what both
    renderers pass to the constructor."""
    defaults = default_object(obj.cls).fields
    return {
        name: value
        for name, value in obj.fields.items()
        if name in obj.shown or not same(value, defaults[name])
    }


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
