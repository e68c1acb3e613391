"""``Configurable``: a component and the dataclass that configures it, wired together.

Every component owns a nested ``@dataclass(kw_only=True, slots=True) class Config``; calling
``config.build(**runtime_kwargs)`` constructs the owner with ``owner(config=config, **kwargs)``.
Runtime objects (the model, the device mesh) are passed to ``build``; everything a user can set
lives in the config.

titan's config classes never import torch: a registry function, ``titan-validate --config`` and
``--help`` stay fast, and the migrator can build live configs without the trainer. A component
whose implementation needs torch either imports it inside its methods, or (for ``nn.Module``
owners) names its implementation with ``_owner_path`` so ``build`` imports it on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar


class Configurable:
    """Base of every component that is constructed from its own ``Config``."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config:
        """Base of every component config: keyword-only fields, slots, and ``build``."""

        _owner: ClassVar[type | None] = None
        _owner_path: ClassVar[str | None] = None
        """``"package.module:Class"`` of an owner defined elsewhere (imported when built)."""
        _ranges: ClassVar[Mapping[str, Any]] = {}
        """field name -> ``titan.schemas.ranges.Range`` its numbers must lie in (``None`` passes);
        a subclass adds to its parents' (``field_ranges``), and the registry check reads them."""

        def build(self, **kwargs: Any) -> Any:
            """Construct the component this config describes, passing ``kwargs`` through."""
            return owner_of(type(self))(config=self, **kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config = cls.__dict__.get("Config")
        if isinstance(config, type) and issubclass(config, Configurable.Config):
            check_config_class(config)
            config._owner = cls


def check_config_class(config: type) -> None:
    """Raise ``TypeError`` unless ``config`` is itself a ``kw_only=True, slots=True`` dataclass.

    A subclass that is not re-decorated would inherit its parent's fields but accept unknown
    attributes and positional arguments again; both are the mistakes this layout exists to stop.
    """
    name = config.__qualname__
    if "__slots__" not in config.__dict__ or "__dataclass_fields__" not in config.__dict__:
        raise TypeError(f"{name} must be decorated with @dataclass(kw_only=True, slots=True)")
    positional = [f.name for f in dataclasses.fields(config) if not f.kw_only]
    if positional:
        raise TypeError(f"{name}: every field must be keyword-only, not {', '.join(positional)}")
    fields = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(field_ranges(config)) - fields)
    if unknown:
        raise TypeError(f"{name}: _ranges names no field {', '.join(unknown)}")


def field_ranges(config: type) -> dict[str, Any]:
    """The ranges ``config``'s fields must lie in: its own ``_ranges`` over its parents'."""
    merged: dict[str, Any] = {}
    for cls in reversed(config.__mro__):
        merged.update(cls.__dict__.get("_ranges", {}))
    return merged


class NotBuildableError(NotImplementedError):
    """A config whose component titan cannot construct (yet); the message says why."""


def owner_of(config: type) -> type:
    """The class that ``config.build()`` constructs, importing it from ``_owner_path`` if needed."""
    owner = config._owner
    if owner is None and config._owner_path is not None:
        module_name, _, qualname = config._owner_path.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            raise NotBuildableError(
                f"{config.__qualname__} cannot be built: its implementation "
                f"{config._owner_path} is not part of this titan yet"
            ) from None
        for part in qualname.split("."):
            target = getattr(target, part)
        owner = config._owner = target
    if owner is None:
        raise NotBuildableError(f"{config.__qualname__} has no component to build")
    return owner
