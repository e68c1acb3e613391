"""The trainers a migration can be written for, by the name ``--target`` takes.

``titan`` (the default) is titan's own trainer, whose config tree can hold every legacy value.
``torchtitan==0.3.0`` is upstream torchtitan's registry form as released on PyPI: its classes and
defaults come from the generated ``migrate/targets/upstream_spec_030.py`` and its homes from
``migrate/targets/upstream_homes.py``; :func:`titan.migrate.targets.upstream.retarget` turns a plan into
one for it. Adding a later upstream release means generating its spec and writing the rows that
changed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from titan.migrate.plan.migration_plan import Plan

TITAN = "titan"
UPSTREAM_030 = "torchtitan==0.3.0"

ALIASES = {
    "torchtitan": UPSTREAM_030,
    "torchtitan==0.3": UPSTREAM_030,
    "torchtitan-0.3.0": UPSTREAM_030,
    "torchtitan@0.3.0": UPSTREAM_030,
}
"""Other spellings of a target (``torchtitan`` is the newest upstream release titan knows)."""

NAMES = (TITAN, UPSTREAM_030)


class UnknownTarget(argparse.ArgumentTypeError):
    """A ``--target`` that names no trainer titan can write for (argparse prints its message
    as it is, so :func:`resolve` is the option's ``type``)."""


def resolve(text: str) -> str:
    """The target a ``--target`` value names; :class:`UnknownTarget` with the choices."""
    name = text.strip()
    name = ALIASES.get(name.lower().replace(" ", ""), name)
    if name in NAMES:
        return name
    choices = ", ".join(NAMES)
    if name.startswith("torchtitan"):
        raise UnknownTarget(
            f"unknown target {text!r}: titan writes for torchtitan 0.3.0 only among upstream "
            f"releases (choose from {choices})"
        )
    raise UnknownTarget(f"unknown target {text!r} (choose from {choices})")


def converter(target: str) -> Callable[[Plan], Plan]:
    """The function that turns a titan plan into a plan for ``target``."""
    if target == TITAN:
        return lambda plan: plan
    from titan.migrate.targets.upstream import retarget

    return retarget


def retarget(plans: list[Plan], target: str) -> list[Plan]:
    """``plans`` for ``target``."""
    convert = converter(target)
    return [convert(plan) for plan in plans]
