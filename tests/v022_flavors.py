"""torchtitan v0.2.2's model flavors, frozen in ``tests/data/v022_flavors.json``.

Per family and flavor the file holds v0.2.2's model-args dict (``args``: every field, defaults
filled in, nested dataclasses as objects) and the config tree titan built for it (``config``,
``titan.config.serialize.to_dict``), written once while titan still converted between the two
both ways. The tests compare titan's flavor factories and its generated flavor table with it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("data") / "v022_flavors.json"


@functools.cache
def _load() -> dict[str, dict[str, dict[str, Any]]]:
    data = json.loads(FILE.read_text(encoding="utf-8"))
    return {family: flavors for family, flavors in data.items() if not family.startswith("_")}


def families() -> tuple[str, ...]:
    """The families v0.2.2 defined flavors for, as the file lists them."""
    return tuple(_load())


def flavor_names(family: str) -> tuple[str, ...]:
    """``family``'s v0.2.2 flavors, in torchtitan's order."""
    return tuple(_load()[family])


def args(family: str, flavor: str) -> dict[str, Any]:
    """A fresh copy of the v0.2.2 model-args dict of ``flavor`` (JSON: sequences are lists)."""
    return json.loads(json.dumps(_load()[family][flavor]["args"]))


def config(family: str, flavor: str) -> dict[str, Any]:
    """A fresh copy of the config tree titan built for ``flavor``, in ``to_dict`` form."""
    return json.loads(json.dumps(_load()[family][flavor]["config"]))


def leaves(tree: Any, path: str = "") -> dict[str, Any]:
    """``dotted path -> value`` of every leaf of a ``to_dict`` tree (class tags included)."""
    if isinstance(tree, dict):
        found: dict[str, Any] = {}
        for key, value in tree.items():
            found.update(leaves(value, f"{path}.{key}" if path else key))
        return found
    if isinstance(tree, list):
        found = {}
        for index, value in enumerate(tree):
            found.update(leaves(value, f"{path}[{index}]"))
        return found if tree else {path: []}
    return {path: tree}


def changed_leaves(family: str, flavor: str, model_config: Any) -> dict[str, tuple[Any, Any]]:
    """The leaves of the frozen config tree of ``flavor`` that ``model_config`` (a config object)
    does not have with the same value and type: ``path -> (frozen, now)``. Fields added since
    (with a default that keeps the v0.2.2 model) are not in the file and not compared."""
    from titan.config.serialize import to_dict

    now = leaves(json.loads(json.dumps(to_dict(model_config))))
    frozen = leaves(config(family, flavor))
    missing = object()
    return {
        path: (value, now.get(path, missing))
        for path, value in frozen.items()
        if type(now.get(path, missing)) is not type(value) or now[path] != value
    }
