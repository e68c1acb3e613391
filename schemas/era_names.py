r"""The ``--era`` value (also a ``# titan: era`` comment's and ``[tool.titan] era``'s): a month, a
day or a torchtitan release, read as the day it names.

A month means the first day of that month; a release (``v0.2.1``, ``torchtitan==0.2.1``) the day
its tag was made (``titan.schemas.era_clues.RELEASES``). Only ASCII digits make a date: Python's
``\d`` would take other scripts' digits too.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from titan.schemas.era_clues import ERA_START, RELEASES, V022

_ERA = re.compile(r"([0-9]{4})-([0-9]{2})(?:-([0-9]{2}))?", re.ASCII)
_RELEASE = re.compile(r"(?:torchtitan\s*(?:==|@|-)?\s*)?v?([0-9]+\.[0-9]+\.[0-9]+)", re.ASCII)


def release_day(text: str) -> str | None:
    """The day of the torchtitan release ``text`` names (``v0.2.1``, ``0.2.1``,
    ``torchtitan==0.2.1``), ``None`` when it names none."""
    found = _RELEASE.fullmatch(text.strip().lower())
    return RELEASES.get(f"v{found.group(1)}") if found is not None else None


def era_error(text: str) -> str | None:
    """Why ``text`` is not a usable ``--era`` value (``None`` if it is)."""
    if release_day(text) is not None:
        return None
    found = _ERA.fullmatch(text.strip())
    if found is None:
        releases = ", ".join(RELEASES)
        return (
            f"--era {text!r} is not a month, a day or a release: write it as YYYY-MM, "
            f"YYYY-MM-DD or one of {releases}"
        )
    year, month, day = (int(part) if part else 1 for part in found.groups())
    try:
        date(year, month, day)
    except ValueError:
        return f"--era {text!r} is not a calendar date: write it as YYYY-MM or YYYY-MM-DD"
    start, end = ERA_START[:7], V022
    if _day(text.strip()) < f"{start}-01" or _day(text.strip()) > end:
        return (
            f"--era {text!r} is outside the legacy eras: torchtitan read TOML files from "
            f"{start} to v0.2.2 ({end}); a file written for v0.2.2 or later is --era v0.2.2"
        )
    return None


def parse_era(text: str) -> str:
    """The day (``YYYY-MM-DD``) a ``--era`` value names; ``ValueError`` with the reason if bad.

    A month means the first day of that month; a release (``v0.2.1``) the day it was tagged."""
    problem = era_error(text)
    if problem is not None:
        raise ValueError(problem)
    return release_day(text) or _day(text.strip())


def _day(era: str) -> str:
    """A month or a day as a day: a month is its first day."""
    return era if len(era) == 10 else f"{era}-01"


def _shift(day: str, days: int) -> str:
    """``day`` moved by ``days`` days."""
    return (date.fromisoformat(day) + timedelta(days=days)).isoformat()
