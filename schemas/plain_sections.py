"""Legacy sections handed over in memory (a Forge actor's dict) made into what a TOML parses to.

A dict can hold what no file can: objects, tuples, non-string keys, itself. The checker and the
migrator read plain data only (dicts of strings to strings, numbers, booleans, lists, dicts), so
the sections are copied into that shape first and everything else becomes a finding at its key
path. Any mapping (an OmegaConf ``DictConfig`` included) and any list or tuple is accepted as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from titan.schemas.diagnostics import Diagnostic, Severity

MAX_DEPTH = 100
"""The deepest nesting accepted, as for a TOML (``titan.schemas.toml_source.MAX_DEPTH``)."""
_SCALARS = (str, bool, int, float, type(None))


def plain_sections(sections: Any, *, file: str) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
    """A plain copy of ``sections`` and the findings on what it could not hold (left out);
    None when ``sections`` is not a mapping at all."""
    found: list[Diagnostic] = []
    if not isinstance(sections, Mapping):
        found.append(
            _finding(
                "",
                f"{file}: the legacy sections must be a mapping of section names, "
                f"not {type(sections).__name__}",
            )
        )
        return None, found
    return _copy(sections, (), found, active=set()), found


def _copy(value: Any, path: tuple, found: list[Diagnostic], *, active: set[int]) -> Any:
    """``value`` as plain data; what cannot be is recorded and left out (returned as ``_DROP``)."""
    if isinstance(value, _SCALARS):
        return value
    if len(path) > MAX_DEPTH or id(value) in active:
        why = "nests deeper than titan reads" if len(path) > MAX_DEPTH else "contains itself"
        found.append(_finding(_dot(path), f"`{_dot(path)}` {why}"))
        return _DROP
    active.add(id(value))
    try:
        if isinstance(value, Mapping):
            copied = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    found.append(_finding(_dot(path), f"the key {key!r} is not a string"))
                    continue
                item = _copy(item, (*path, key), found, active=active)
                if item is not _DROP:
                    copied[key] = item
            return copied
        if isinstance(value, list | tuple):
            items = [_copy(v, (*path, i), found, active=active) for i, v in enumerate(value)]
            if any(item is _DROP for item in items):
                return _DROP
            return items
    finally:
        active.discard(id(value))
    found.append(
        _finding(
            _dot(path),
            f"`{_dot(path)}` is a {type(value).__name__}, which no legacy JobConfig setting holds",
        )
    )
    return _DROP


_DROP = object()


def _dot(path: tuple) -> str:
    """A key path as the checker's dotted key."""
    return ".".join(str(p) for p in path)


def _finding(path: str, message: str) -> Diagnostic:
    """A ``wrong-type`` error about a value the sections cannot carry."""
    return Diagnostic(
        code="wrong-type",
        severity=Severity.ERROR,
        path=path,
        message=message,
        hint="give strings, numbers, booleans, lists and mappings with string keys",
    )
