"""Questions about torchtitan 0.3.0's API, answered from the generated tables alone.

``migrate/targets/upstream_api_030.py`` (what a module can import and call) and
``migrate/targets/upstream_spec_030.py`` (families, flavors, attention backends) are read here and
nowhere else in the static check, so the reader never spells a table's layout.
"""

from __future__ import annotations

import functools
from typing import Any

from titan.migrate.targets import upstream_api_030 as api
from titan.migrate.targets import upstream_spec_030 as spec

TRAINER = "torchtitan.trainer:Trainer.Config"
MODEL_SPEC = api.MODEL_SPEC
VERSION = api.VERSION


def is_module(name: str) -> bool:
    return name in api.NAMES


def unimportable(name: str) -> bool:
    """A module of the package that the table could not read (it needs a package the release
    does not depend on), or one below it."""
    return any(name == m or name.startswith(m + ".") for m in api.UNIMPORTABLE)


def is_package_module(name: str) -> bool:
    """Whether ``name`` is torchtitan or a module below it."""
    return name == "torchtitan" or name.startswith("torchtitan.")


def names_of(module: str) -> tuple[str, ...]:
    return api.NAMES.get(module, ())


def export(module: str, name: str) -> tuple[str, str] | None:
    """What ``from module import name`` binds: ``("module" | "class" | "function", path)``, or
    ``None`` for a name the table does not describe."""
    found = api.EXPORTS.get(f"{module}:{name}")
    if found is None:
        sub = f"{module}.{name}"
        return ("module", sub) if sub in api.NAMES else None
    kind, _, path = found.partition(":")
    return kind, path


def has_name(module: str, name: str) -> bool:
    return name in api.NAMES.get(module, ()) or f"{module}.{name}" in api.NAMES


@functools.cache
def _owners() -> frozenset[str]:
    return frozenset(
        p.partition(":")[0] + ":" + p.partition(":")[2].split(".")[0] for p in api.FIELDS
    )


def is_class(path: str) -> bool:
    """A class the table knows: a config class, or the owner of nested config classes."""
    return path in api.FIELDS or path in _owners() or path == MODEL_SPEC


def is_config_class(path: str) -> bool:
    return path in api.FIELDS


def fields(path: str) -> dict[str, dict[str, Any]]:
    return api.FIELDS[path]["fields"]


def kw_only(path: str) -> bool:
    return api.FIELDS[path]["kw_only"]


def bases(path: str) -> tuple[str, ...]:
    return api.BASES.get(path, ())


def is_subclass(path: str, base: str) -> bool:
    return path == base or base in api.BASES.get(path, ())


def is_trainer(path: str) -> bool:
    return is_subclass(path, TRAINER)


def function(path: str) -> dict[str, Any] | None:
    return api.FUNCTIONS.get(path)


def family_of(function_path: str) -> str | None:
    """The family whose ``model_registry`` this is (``torchtitan.models.llama3:model_registry``
    is llama3's), or ``None``."""
    module, _, name = function_path.partition(":")
    if name != "model_registry":
        return None
    family = module.rpartition(".")[2]
    info = spec.FAMILIES.get(family)
    return family if info is not None and info.module == module else None


def flavors(family: str) -> tuple[str, ...]:
    return spec.FAMILIES[family].flavors


def flavor_facts(family: str, flavor: str) -> dict[str, Any]:
    return api.FLAVOR_FACTS.get(family, {}).get(flavor, {})


def attention_backends() -> tuple[str, ...]:
    return spec.ATTENTION_BACKENDS


def refused_backends() -> dict[str, str]:
    return spec.REFUSED_ATTENTION_BACKENDS


def short(path: str) -> str:
    """``TrainingConfig``, ``CheckpointManager.Config``: how code names a class."""
    return path.rpartition(":")[2]


@functools.cache
def field_owners() -> dict[str, tuple[str, ...]]:
    """field name -> the config classes that have it (for "belongs to another class" hints)."""
    found: dict[str, list[str]] = {}
    for path, row in api.FIELDS.items():
        for name in row["fields"]:
            found.setdefault(name, []).append(path)
    return {name: tuple(paths) for name, paths in found.items()}


def trainer_home(path: str) -> str | None:
    """The ``Trainer.Config`` field whose default is of this class (``parallelism`` for
    ``ParallelismConfig``), for hints."""
    for name, row in fields(TRAINER).items():
        tp = row["type"]
        options = tp[1] if isinstance(tp, tuple) and tp[0] == "union" else (tp,)
        for option in options:
            if isinstance(option, tuple) and option[0] == "config" and is_subclass(path, option[1]):
                return name
    return None
