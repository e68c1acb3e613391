"""A base for the small immutable value classes of ``schemas`` (spans, diagnostics, schema specs).

They used to be ``@dataclass(frozen=True, slots=True)``. ``titan-validate`` runs in pre-commit
hooks and must start in a few tens of milliseconds, and ``import dataclasses`` alone (it imports
``inspect``, ``ast``, ``dis``, ``tokenize`` ...) plus generating each class's methods with
``exec`` cost more than checking a whole corpus. So each class writes its ``__init__`` by hand
(compiled into the ``.pyc`` like any other code) and inherits the rest from :class:`Frozen`,
which behaves as the dataclass did: field-wise ``==`` and ``hash``, a ``Name(field=value, ...)``
repr, ``dataclasses.FrozenInstanceError`` on assignment, and ``dataclasses.replace``,
``fields``, ``asdict`` and ``is_dataclass`` still work (see :class:`DataclassFields`).
"""

from __future__ import annotations

from typing import Any

_set = object.__setattr__


def _frozen_error(message: str) -> Exception:
    # Imported only when someone tries to mutate a value, which never happens on the hot path.
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)


class DataclassFields:
    """``__dataclass_fields__`` and ``__dataclass_params__``, made on first use.

    They are what ``dataclasses.replace``, ``fields``, ``asdict`` and ``is_dataclass`` look for,
    so code written for the dataclasses these classes were keeps working; ``dataclasses`` is
    imported only when such code runs. The fields are the ``__init__`` parameters, in order,
    with their defaults; ``_default_factories`` names the fields whose default is a factory.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type) -> Any:
        shadow = owner.__dict__.get("_dataclass_shadow")
        if shadow is None:
            shadow = _shadow_dataclass(owner)
            type.__setattr__(owner, "_dataclass_shadow", shadow)
        return getattr(shadow, self.name)


def _shadow_dataclass(cls: type) -> type:
    """A dataclass with ``cls``'s fields, defaults and flags, to take its field objects from."""
    import dataclasses

    init = cls.__init__
    code = init.__code__
    positional = code.co_varnames[1 : code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    trailing = init.__defaults__ or ()  # the defaults of the last positional parameters
    defaults = dict(zip(positional[len(positional) - len(trailing) :], trailing, strict=True))
    defaults.update(init.__kwdefaults__ or {})
    factories = getattr(cls, "_default_factories", {})
    annotations = getattr(cls, "__annotations__", {})
    specs = []
    for name in (*positional, *keyword_only):
        if name in factories:
            spec = dataclasses.field(default_factory=factories[name])
        elif name in defaults:
            spec = dataclasses.field(default=defaults[name])
        else:
            spec = dataclasses.field()
        specs.append((name, annotations.get(name, "Any"), spec))
    return dataclasses.make_dataclass(
        cls.__name__, specs, frozen=issubclass(cls, Frozen), kw_only=bool(keyword_only)
    )


class Frozen:
    """Immutable, slotted value object; subclasses list their fields in ``__slots__``."""

    __slots__ = ()
    __dataclass_fields__ = DataclassFields()
    __dataclass_params__ = DataclassFields()

    def _values(self) -> tuple:
        return tuple([getattr(self, name) for name in self.__slots__])

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        raise _frozen_error(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen_error(f"cannot delete field {name!r}")

    # copy, deepcopy and pickle restore slots with setattr, which a frozen class refuses.
    def __getstate__(self) -> tuple:
        return self._values()

    def __setstate__(self, state: tuple) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            _set(self, name, value)
