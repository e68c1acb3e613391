"""Every legacy TOML has a hand-written registry function that describes the same run.

The expected config is built here, independently of the registry files, from the TOML and the
homes table (``migrate/plan/homes.py``): start from the trainer class' defaults and put every leaf
value the TOML writes at its home. The few keys whose home is not a plain field (model family and
flavor, converters, the trainer class, the validation batch shape) are handled one by one below.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import subprocess
import sys
import tomllib
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from titan.migrate.plan.homes import TRAINER, base_homes, home
from titan.schemas import flavors
from titan.schemas.extension_reader import KNOWN_EXTENSIONS, read_extension
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec

from tests.helpers import legacy_tomls
from titan.config.configurable import check_config_class
from titan.models import SUPPORTED_MODELS, family_name

REPO = Path(__file__).resolve().parents[1]
LEGACY = REPO / "legacy_configs"
TOMLS = legacy_tomls()
CUSTOM = LEGACY / "custom"

REGISTRY_MODULES = tuple(f"titan.models.{family}.config_registry" for family in SUPPORTED_MODELS)
CUSTOM_MODULE = "legacy_custom_config_registry"
"""Import name given to ``legacy_configs/custom/config_registry.py`` (not inside a package)."""

CUSTOM_TRAINERS = {"probe_extension": "ProbeTrainerConfig", "team_ext": "TeamTrainerConfig"}
"""Custom config module -> the ``Trainer.Config`` subclass that replaces it (reference §5)."""

TRAINER_OF_MODEL = flavors.MODEL_TRAINERS
"""``model.name`` values that need a trainer subclass even when no key of theirs is written
(each family's record names them)."""


VALIDATION_SHAPE = {
    "validation.local_batch_size": "training.local_batch_size",
    "validation.seq_len": "training.seq_len",
}
"""Legacy validation shape keys: independent of training, titan's homes follow it when None."""


# --------------------------------------------------------------------------- reading the TOMLs


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    leaves = {}
    for key, value in table.items():
        if isinstance(value, dict):
            leaves |= flatten(value, f"{prefix}{key}.")
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


@functools.cache
def legacy_leaves(toml: Path) -> dict[str, Any]:
    return flatten(tomllib.loads(toml.read_text(encoding="utf-8")))


def function_name(toml: Path) -> str:
    """``<folder>_<stem>``: ``debug_model`` -> ``debugmodel``, ``.`` -> ``_``, no doubled prefix.

    The custom examples are already named after their model family (``llama3_team``)."""
    stem = toml.stem.replace("debug_model", "debugmodel").replace(".", "_")
    prefix = toml.parent.name
    if prefix == "custom" or stem.startswith(f"{prefix}_"):
        return stem
    return f"{prefix}_{stem}"


def legacy_default(key: str) -> Any:
    section: Any = LEGACY_SPEC
    for part in key.split("."):
        spec = section.field(part)
        section = spec.annotation
    return spec.default


def load(path: str) -> Any:
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


# --------------------------------------------------------------------------- the registries


@functools.cache
def custom_registry() -> ModuleType:
    spec = importlib.util.spec_from_file_location(CUSTOM_MODULE, CUSTOM / "config_registry.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CUSTOM_MODULE] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


def registry_of(toml: Path) -> ModuleType:
    """The custom examples live beside their extension modules; every other folder is a family
    (``llama3_ft`` is llama3 under the fault-tolerant trainer)."""
    if toml.parent.name == "custom":
        return custom_registry()
    return importlib.import_module(f"titan.models.{family_name(toml.parent.name)}.config_registry")


def all_registries() -> list[ModuleType]:
    return [*map(importlib.import_module, REGISTRY_MODULES), custom_registry()]


def registry_functions(module: ModuleType) -> dict[str, Any]:
    """The public functions a module defines (imported names and classes are not registry entries)."""
    return {
        name: obj
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
    }


# --------------------------------------------------------------------------- the expected config


def set_path(root: Any, path: str, value: Any) -> None:
    *parents, name = path.split(".")
    for part in parents:
        root = getattr(root, part)
    if not hasattr(root, name):
        raise AssertionError(f"home {path!r} does not exist on {type(root).__qualname__}")
    setattr(root, name, value)


def extension_of(leaves: dict[str, Any]) -> str | None:
    module = leaves.get("job.custom_config_module")
    return KNOWN_EXTENSIONS.get(module, module) if module else None


def trainer_class(toml: Path, homes: dict[str, Any]) -> type:
    extension = extension_of(legacy_leaves(toml))
    if extension in CUSTOM_TRAINERS:
        return getattr(custom_registry(), CUSTOM_TRAINERS[extension])
    trainers = {found.trainer for found in homes.values() if found is not None} - {TRAINER}
    if legacy_leaves(toml)["model.name"] in TRAINER_OF_MODEL:
        trainers.add(TRAINER_OF_MODEL[legacy_leaves(toml)["model.name"]])
    assert len(trainers) <= 1, f"{toml}: keys need different trainers {trainers}"
    return load(trainers.pop() if trainers else TRAINER)


@functools.cache
def converter_classes() -> dict[str, type]:
    """Legacy converter name -> converter config class, from the converter homes."""
    classes = {load(h.config_class) for h in base_homes().values() if h.kind == "converter"}
    return {cls._legacy_name: cls for cls in classes}


def converters(leaves: dict[str, Any]) -> list[Any]:
    """``model.converters`` in order, each carrying its ``[quantize.*]`` table; tables of
    converters that are not listed stay off (v0.2.2 never read them)."""
    built = []
    for name in leaves.get("model.converters", []):
        assert name in converter_classes(), f"unknown converter {name!r}"
        options = {
            home(key).path: value
            for key, value in leaves.items()
            if key.rpartition(".")[0] == name and home(key).kind == "converter"
        }
        built.append(converter_classes()[name](**options))
    return built


def expected_config(toml: Path) -> Any:
    leaves = legacy_leaves(toml)
    extension = extension_of(leaves)
    homes = {key: home(key, extension=extension) for key in leaves}
    config = trainer_class(toml, homes)()
    family = family_name(leaves["model.name"])  # llama3_ft: llama3 with the FT trainer
    for key, value in leaves.items():
        found = homes[key]
        if found is None:
            # A section of a custom config module: a field of the same name on the subclass.
            assert extension in CUSTOM_TRAINERS, f"{toml.name}: {key} has no home"
            set_path(config, key, value)
        elif key in VALIDATION_SHAPE or found.kind in ("converter", "dropped"):
            continue  # handled below, or (dropped) nowhere to go
        elif found.kind == "structural":
            assert key in (
                "model.name",
                "model.flavor",
                "model.converters",
                "job.custom_config_module",
                "optimizer.early_step_in_backward",
                "model.tokenizer_path",
            ), f"structural home of {key} not handled by this test"
        else:
            for path in (found.path, *found.also):
                set_path(config, path, value)
    if isinstance(leaves.get("model.tokenizer_path"), str):
        # v0.2.2 copied it over hf_assets_path after loading, whatever that said
        set_path(config, homes["model.tokenizer_path"].path, leaves["model.tokenizer_path"])
    module = importlib.import_module(f"titan.models.{family}")
    config.model_spec = module.model_registry(leaves["model.flavor"])
    config.model_converters.converters = converters(leaves)
    # The legacy validation batch shape defaulted to 8 x 2048 whatever training used, with or
    # without a [validation] table (validation can be switched on with a flag).
    for key, training_key in VALIDATION_SHAPE.items():
        legacy = leaves.get(key, legacy_default(key))
        if legacy != leaves.get(training_key, legacy_default(training_key)):
            set_path(config, home(key, extension=extension).path, legacy)
    if leaves.get("optimizer.early_step_in_backward"):
        in_backward = load("titan.components.optimizer:OptimizersInBackwardContainer.Config")
        fields = dataclasses.fields(config.optimizer)
        config.optimizer = in_backward(
            **{f.name: getattr(config.optimizer, f.name) for f in fields}
        )
    return config


# --------------------------------------------------------------------------- comparing


def assert_same_classes(actual: Any, expected: Any, path: str = "config") -> None:
    """Same type at every dataclass node, list element and leaf (so ``1`` is not ``1.0``)."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if dataclasses.is_dataclass(actual):
        for f in dataclasses.fields(actual):
            name = f"{path}.{f.name}"
            assert_same_classes(getattr(actual, f.name), getattr(expected, f.name), name)
    elif isinstance(actual, list | tuple):
        assert len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_classes(a, e, f"{path}[{i}]")
    elif isinstance(actual, dict):
        assert actual.keys() == expected.keys(), path
        for key in actual:
            assert_same_classes(actual[key], expected[key], f"{path}[{key!r}]")


def mutable_nodes(obj: Any, path: str = "config") -> dict[int, str]:
    """id -> path of every mutable node (non-frozen dataclass, list, dict) in a config tree."""
    nodes = {}
    if dataclasses.is_dataclass(obj) and not obj.__dataclass_params__.frozen:
        nodes[id(obj)] = path
        for f in dataclasses.fields(obj):
            nodes |= mutable_nodes(getattr(obj, f.name), f"{path}.{f.name}")
    elif isinstance(obj, list | dict):
        nodes[id(obj)] = path
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for key, value in items:
            nodes |= mutable_nodes(value, f"{path}[{key!r}]")
    return nodes


def shared_nodes(obj: Any) -> list[str]:
    """Paths of mutable nodes reached twice in one config (outside the model's own tree)."""
    seen: dict[int, str] = {}
    shared = []

    def walk(node: Any, path: str) -> None:
        if path == "config.model_spec":
            return
        if dataclasses.is_dataclass(node) and not node.__dataclass_params__.frozen:
            children = [
                (getattr(node, f.name), f"{path}.{f.name}") for f in dataclasses.fields(node)
            ]
        elif isinstance(node, list | dict):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            children = [(value, f"{path}[{key!r}]") for key, value in items]
        else:
            return
        if id(node) in seen:
            shared.append(f"{path} is {seen[id(node)]}")
            return
        seen[id(node)] = path
        for child, child_path in children:
            walk(child, child_path)

    walk(obj, "config")
    return shared


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("toml", TOMLS, ids=lambda p: str(p.relative_to(LEGACY)))
def test_registry_function_equals_the_toml(toml):
    name = function_name(toml)
    function = registry_functions(registry_of(toml)).get(name)
    assert function is not None, f"{toml.relative_to(REPO)} has no registry function {name}"
    assert not inspect.signature(function).parameters, f"{name} must take no arguments"
    expected = expected_config(toml)
    actual = function()
    assert actual == expected
    assert_same_classes(actual, expected)
    description = legacy_leaves(toml)["job.description"]
    assert (inspect.getdoc(function) or "").splitlines()[0].rstrip(".") == description.rstrip(".")


def test_every_registry_function_is_a_toml():
    names = {function_name(toml) for toml in TOMLS}
    assert len(names) == len(TOMLS), "two TOMLs map to one function name"
    defined = [name for module in all_registries() for name in registry_functions(module)]
    assert sorted(defined) == sorted(names)


def test_function_names_follow_the_naming_rule():
    assert function_name(LEGACY / "llama3" / "llama3_8b.toml") == "llama3_8b"
    assert function_name(LEGACY / "qwen3" / "qwen3_0.6b.toml") == "qwen3_0_6b"
    assert function_name(LEGACY / "llama3_ft" / "debug_model.toml") == "llama3_ft_debugmodel"
    assert function_name(LEGACY / "flux" / "flux_dev_model.toml") == "flux_dev_model"
    for toml in TOMLS:
        name = function_name(toml)
        assert name.isidentifier() and name == name.lower(), name
        assert name.startswith(legacy_leaves(toml)["model.name"] + "_"), name


@pytest.mark.parametrize("module", [*REGISTRY_MODULES, CUSTOM_MODULE])
def test_each_call_returns_a_fresh_config(module):
    module = custom_registry() if module == CUSTOM_MODULE else importlib.import_module(module)
    for name, function in registry_functions(module).items():
        first, second = function(), function()
        assert first == second and first is not second, name
        assert not shared_nodes(first), f"{name}: {shared_nodes(first)}"
        shared = mutable_nodes(first).keys() & mutable_nodes(second).keys()
        assert not shared, f"{name}: {[mutable_nodes(first)[i] for i in shared]} shared by calls"
        first.training.steps += 1
        first.parallelism.data_parallel_shard_degree = 4
        assert function() == second, name


def test_custom_trainer_configs_keep_the_legacy_sections():
    """The subclasses carry every field of their custom module, with its type and default."""
    for toml in TOMLS:
        leaves = legacy_leaves(toml)
        extension = extension_of(leaves)
        if extension not in CUSTOM_TRAINERS:
            continue
        legacy = read_extension(leaves["job.custom_config_module"], search_dirs=[toml.parent])
        assert not legacy.notes, legacy.notes
        config_class = getattr(custom_registry(), CUSTOM_TRAINERS[extension])
        assert issubclass(config_class, load(TRAINER))
        check_config_class(config_class)
        check_section(legacy.root, config_class(), extension)


def check_section(section: SectionSpec, obj: Any, where: str) -> None:
    for spec in section.fields:
        assert hasattr(obj, spec.name), f"{where}.{spec.name} has no home"
        value = getattr(obj, spec.name)
        if isinstance(spec.annotation, SectionSpec):
            assert dataclasses.is_dataclass(value), f"{where}.{spec.name}"
            check_config_class(type(value))  # kw_only and slots, like every titan section
            check_section(spec.annotation, value, f"{where}.{spec.name}")
        else:
            assert value == spec.default and type(value) is type(spec.default), spec.name
            hints = typing.get_type_hints(type(obj))
            assert hints[spec.name] == spec.annotation, f"{where}.{spec.name}"


def test_registries_do_not_import_torch():
    code = (
        "import importlib, importlib.util, sys\n"
        f"modules = [importlib.import_module(m) for m in {list(REGISTRY_MODULES)!r}]\n"
        f"spec = importlib.util.spec_from_file_location({CUSTOM_MODULE!r}, {str(CUSTOM)!r} + "
        "'/config_registry.py')\n"
        "custom = importlib.util.module_from_spec(spec)\n"
        f"sys.modules[{CUSTOM_MODULE!r}] = custom\n"
        "spec.loader.exec_module(custom)\n"
        "for module in [*modules, custom]:\n"
        "    for name, obj in vars(module).items():\n"
        "        if callable(obj) and getattr(obj, '__module__', None) == module.__name__ \\\n"
        "                and not name.startswith('_') and name.islower():\n"
        "            obj()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
