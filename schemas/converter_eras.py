"""When an older torchtitan registered each stale converter name, and the old keys that date a file
to that time.

A file that names ``"float8"`` failed at v0.2.2, which registers ``"quantize.linear.float8"``; but
if its other keys date it to when ``"float8"`` was registered, its run had the converter. The
rules (``titan.schemas.rules``) say the name's era in their hint; the migrator
(``titan.migrate.plan.converters``) keeps the converter for such a file.
"""

from __future__ import annotations

from titan.schemas._frozen import Frozen, _set


class StaleName(Frozen):
    """When an older torchtitan registered a converter name, and the tables of that time."""

    __slots__ = ("since", "until", "commits", "tables")
    __match_args__ = ("since", "until", "commits", "tables")

    since: str
    """The month it was first registered (``2025-02``)."""
    until: str
    """The month it was renamed (``2025-09``)."""
    commits: str
    """The commits that registered and renamed it."""
    tables: tuple[str, ...]
    """Old tables (``titan.schemas.moved_keys``) whose keys were in use while the name was
    registered: one of them in a file dates it to a run that had the converter."""

    def __init__(self, since: str, until: str, commits: str, tables: tuple[str, ...]) -> None:
        _set(self, "since", since)
        _set(self, "until", until)
        _set(self, "commits", commits)
        _set(self, "tables", tables)

    @property
    def months(self) -> str:
        """``2025-02 to 2025-09``."""
        return self.since if self.since == self.until else f"{self.since} to {self.until}"

    @property
    def era(self) -> str:
        """``registered by torchtitan from 2025-02 to 2025-09 (...)``."""
        return f"registered by torchtitan from {self.months} ({self.commits})"


_V01 = ("float8", "mx")
_DENSE = ("quantize.dense", "quantize.moe")
_RENAMED = "renamed in #1763, 8a2686c4"
STALE_NAME_ERAS: dict[str, StaleName] = {
    "float8": StaleName(
        "2025-02",
        "2025-09",
        'model.converters in #823, 57387af0; renamed "quantize.dense.float8" in #1701, 5b5d4685',
        _V01,
    ),
    "mx": StaleName("2025-05", "2025-09", 'renamed "quantize.dense.mx" in #1701, 5b5d4685', _V01),
    **{
        name: StaleName("2025-09", "2025-09", f"on main from #1701, 5b5d4685; {_RENAMED}", _DENSE)
        for name in (
            "quantize.dense.float8",
            "quantize.moe.float8",
            "quantize.dense.mx",
            "quantize.moe.mx",
        )
    },
}
"""The era of each stale converter name (``manager_behaviour.md`` §6, ``titan.schemas.moved_keys``)."""


def stale_name_dated(name: str, document: dict) -> str | None:
    """The old key that dates ``document`` to when ``name`` was a registered converter, if one
    does: a key of that era's tables that was still in use after the name was registered.
    Such a file's run had the converter; v0.2.2 only failed on it because the name changed."""
    import re

    from titan.schemas import eras

    stale = STALE_NAME_ERAS.get(name)
    if stale is None:
        return None
    for parts, _ in eras.leaves(document):
        rule = eras.rule_for(parts)
        if rule is None or rule.how == "converter":  # the switch model.converters replaced
            continue
        if not any(rule.old == t or rule.old.startswith(t + ".") for t in stale.tables):
            continue
        until = re.search(r" to (\d{4}-\d{2})", rule.era)
        if until is None or until.group(1) >= stale.since:
            return ".".join(parts)
    return None
