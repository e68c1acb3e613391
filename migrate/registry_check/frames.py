"""The reading's running state: a function's frame, how a reading stops, its limits.

Apart from ``reader`` (statements and expressions) and ``calls`` (what a call does), which both
use them.
"""

from __future__ import annotations

import builtins
import dataclasses
from typing import Any

from titan.migrate.registry_check.values import At

STEPS = 200_000
"""Expressions and statements one module may take to read (a module of upstream's size takes a
few thousand)."""
DEPTH = 24
"""How deeply calls of the module's own functions nest."""
BIG = 2**256
"""Numbers past this are not computed with (``10 ** 10 ** 10``)."""
LONG = 100_000
"""Strings and lists longer than this are not built."""

BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__"}
"""Names every module has (an unknown use of one is not a ``NameError``)."""

FOLLOWED = {
    "typing:cast": "cast",
    "dataclasses:replace": "replace",
    "copy:deepcopy": "copy",
    "copy:copy": "copy",
    "dataclasses:field": "field",
}
"""Standard-library functions whose meaning the reader follows."""


class OutOfSteps(Exception):
    pass


class Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclasses.dataclass
class Function:
    """What reading one registry function found."""

    name: str
    at: At
    result: Any = None
    unread: list[tuple[At, str]] = dataclasses.field(default_factory=list)


class Frame:
    """One running function's names."""

    def __init__(self, reader: Any, names: dict[str, Any], *, parent: Frame | None, name: str):
        self.reader, self.names, self.parent, self.name = reader, names, parent, name
        self.uncertain = 0
        self.branched = False
        """Whether a branch, loop or ``try`` was read in uncertain mode: falling off the end
        then does not say the function returns None (it may have returned, or never end)."""

    def lookup(self, name: str) -> Any:
        frame: Frame | None = self
        while frame is not None:
            if name in frame.names:
                return frame.names[name]
            frame = frame.parent
        return MISSING


MISSING = object()
