"""Every legacy key has a home in titan's config tree, with the legacy type and default."""

from __future__ import annotations

import dataclasses
import importlib
import typing

import pytest
from reference import extension_keys, reference_keys
from titan.migrate.plan.homes import EXTENSION_HOMES, SAME, TRAINER, base_homes, home
from titan.schemas.builtin_extensions_spec import BUILT_IN
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec

BASE = base_homes()


def load(path: str):
    module_name, _, qualname = path.partition(":")
    target = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def legacy_field(key: str):
    section = LEGACY_SPEC
    *sections, name = key.split(".")
    for part in sections:
        section = section.field(part).annotation
        assert isinstance(section, SectionSpec)
    return section.field(name)


def resolve(obj, path: str):
    """(owner object, field name, value) at a dotted attribute path."""
    *parents, name = path.split(".")
    for part in parents:
        obj = getattr(obj, part)
    return obj, name, getattr(obj, name)


def test_every_reference_key_has_exactly_the_base_homes():
    assert set(BASE) == set(reference_keys())
    assert len(BASE) == 149


def test_every_extension_key_has_a_home():
    for key, (_, module) in extension_keys().items():
        found = home(key, extension=module)
        assert found is not None and found.extension == module, key
    # and no row for a key the reference does not have
    assert {key for _, key in EXTENSION_HOMES} == set(extension_keys())


@pytest.mark.parametrize("legacy", sorted(BASE))
def test_base_home_keeps_type_and_default(legacy):
    check_home(BASE[legacy], legacy_field(legacy).default, legacy_field(legacy).annotation)


def builtin_default(module: str, key: str):
    """The default a built-in custom config module gives ``key`` (titan's own reading of it)."""
    section = BUILT_IN[module].root
    *sections, name = key.split(".")
    for part in sections:
        section = section.field(part).annotation
        assert isinstance(section, SectionSpec), key
    return section.field(name).default


def test_builtin_module_defaults_match_the_reference():
    for key, (row, module) in extension_keys().items():
        default = builtin_default(module, key)
        assert default == row.default and type(default) is type(row.default), key


@pytest.mark.parametrize("module,key", sorted(EXTENSION_HOMES))
def test_extension_home_keeps_default(module, key):
    found = home(key, extension=module)
    if found.kind == "dropped":
        assert found.note
        return
    expected = builtin_default(module, key)
    trainer = load(found.trainer)()
    _, _, value = resolve(trainer, found.path)
    assert value == expected and type(value) is type(expected), key


def check_home(found, legacy_default, legacy_type):
    if found.kind == "dropped":
        assert found.note and found.path is None
        return
    if found.kind == "structural":
        assert found.note
        trainer = load(found.trainer)()
        if found.path is not None:
            assert hasattr(trainer, found.path.split(".")[0])
        return
    if found.kind == "converter":
        owner = load(found.config_class)()
        name, value = found.path, getattr(owner, found.path)
    else:
        owner, name, value = resolve(load(found.trainer)(), found.path)
    expected = legacy_default if found.default is SAME else found.default
    assert value == expected and type(value) is type(expected), found.legacy
    if found.default is not SAME:
        assert found.note, f"{found.legacy}: a changed default needs a note"
        legacy_type = legacy_type | None
    hints = typing.get_type_hints(type(owner))
    assert hints[name] == legacy_type, found.legacy


def test_structural_defaults():
    trainer = load(TRAINER)()
    assert trainer.model_spec is None
    assert type(trainer.optimizer) is load(BASE["optimizer.early_step_in_backward"].default)
    assert trainer.model_converters.converters == []
    in_backward = load("titan.components.optimizer:OptimizersInBackwardContainer.Config")()
    assert isinstance(in_backward, type(trainer.optimizer))


def test_converter_classes_name_their_legacy_converter():
    for found in BASE.values():
        if found.kind == "converter":
            config_class = load(found.config_class)
            assert found.legacy.startswith(config_class._legacy_name + ".")


def test_sections_keep_field_order_and_nothing_extra():
    """A section that moved wholesale has no field the legacy section lacks (except new ones)."""
    trainer = load(TRAINER)()
    new_fields = {"dataloader": {"infinite"}, "validator": {"dataloader"}, "debug": set()}
    for section, path in (("training.dataloader", "dataloader"), ("debug", "debug")):
        legacy = {f.name for f in legacy_field(section).annotation.fields}
        _, _, obj = resolve(trainer, path)
        names = {f.name for f in dataclasses.fields(obj)}
        extra = names - legacy - {"dataset", "dataset_path"} - new_fields[path]
        assert extra <= {"print_config", "save_config_file"}, extra
