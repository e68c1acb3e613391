"""The values the static reader computes with.

A registry function's statements are followed as Python would run them, but every value is one
of these: a plain literal (``int``, ``str``, lists and dicts of values), a config object
(:class:`Obj`), a model spec (:class:`Spec`), something the module names (:class:`Ref`), or
:class:`Unknown` for whatever cannot be known without running code. Nothing here imports
torchtitan or runs user code.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class At:
    """Where something is written: 1-based line and column (and the column after it)."""

    line: int
    col: int
    end_col: int | None = None


class Unknown:
    """A value that cannot be read statically, and why."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"Unknown({self.why!r})"

    def __deepcopy__(self, memo: dict) -> Unknown:
        return self


class Obj:
    """A config object: its class (``module:Qual.Name``), the fields written so far and where.

    ``opaque`` objects come from a function whose body is not read (``default_adamw(...)``):
    their unwritten fields are unknown rather than the class' defaults."""

    __slots__ = ("cls", "values", "spans", "at", "opaque", "local")

    def __init__(self, cls: str, at: At | None, *, opaque: bool = False, local: Any = None):
        self.cls = cls
        self.values: dict[str, Any] = {}
        self.spans: dict[str, At] = {}
        self.at = at
        self.opaque = opaque
        self.local = local
        """The module's own class (a dataclass subclassing a config class), when it is one."""

    def __repr__(self) -> str:
        return f"Obj({self.cls}, {self.values})"


class Spec:
    """``model_registry(flavor, ...)``'s model spec."""

    __slots__ = ("family", "flavor", "kwargs", "at")

    def __init__(self, family: str, flavor: Any, kwargs: dict[str, Any], at: At | None):
        self.family, self.flavor, self.kwargs, self.at = family, flavor, kwargs, at

    def __repr__(self) -> str:
        return f"Spec({self.family}, {self.flavor!r})"


class Ref:
    """Something the module names: a module, class or function of torchtitan (``kind`` is
    ``module`` / ``class`` / ``function``), a function or class of the module itself
    (``def`` / ``localclass``), or one of the few standard-library helpers the reader follows
    (``builtin``)."""

    __slots__ = ("kind", "path", "node", "frame")

    def __init__(self, kind: str, path: str, node: Any = None, frame: Any = None) -> None:
        self.kind, self.path, self.node, self.frame = kind, path, node, frame

    def __repr__(self) -> str:
        return f"Ref({self.kind}, {self.path})"

    def __deepcopy__(self, memo: dict) -> Ref:
        return self


def plain(value: Any) -> bool:
    """A literal the reader can compute with (no unknown part, no object)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(plain(k) and plain(v) for k, v in value.items())
    return False


def has_unknown(value: Any, depth: int = 0) -> bool:
    if depth > 50:
        return True
    if isinstance(value, Unknown):
        return True
    if isinstance(value, list | tuple):
        return any(has_unknown(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(has_unknown(v, depth + 1) for v in value.values())
    return False
