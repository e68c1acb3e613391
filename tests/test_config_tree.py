"""``Configurable`` and the ``Trainer.Config`` tree: layout rules, docstrings, no torch."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import subprocess
import sys
import textwrap
import typing

import pytest

import titan.components.quantization.float8
import titan.components.quantization.mx  # noqa: F401  (registers the converter classes)
from titan.components.optimizer import OptimizersInBackwardContainer
from titan.config import Configurable, NotBuildableError
from titan.config.configurable import owner_of
from titan.experiments.ft.trainer import FaultTolerantTrainer
from titan.models.flux.trainer import FluxTrainer
from titan.protocols.model_converter import ModelConverter
from titan.trainer import Trainer

ROOTS = (Trainer.Config, FluxTrainer.Config, FaultTolerantTrainer.Config)


def config_classes() -> set[type]:
    """Every dataclass reachable from the trainer configs' annotations, plus all converters."""
    seen: set[type] = set()
    todo = [*ROOTS, OptimizersInBackwardContainer.Config, *_subclasses(ModelConverter.Config)]
    while todo:
        cls = todo.pop()
        if cls in seen or not dataclasses.is_dataclass(cls):
            continue
        seen.add(cls)
        for hint in typing.get_type_hints(cls).values():
            todo += [t for t in _flatten(hint) if dataclasses.is_dataclass(t)]
        todo += [type(f.default_factory()) for f in dataclasses.fields(cls) if _has_factory(f)]
    # Model trees are checked by tests/test_models.py.
    model_modules = ("titan.models.common", ".model_config")
    return {
        c
        for c in seen
        if c.__module__.startswith("titan.") and not any(m in c.__module__ for m in model_modules)
    }


def _has_factory(field: dataclasses.Field) -> bool:
    return field.default_factory is not dataclasses.MISSING


def _flatten(hint) -> list:
    args = typing.get_args(hint)
    return [hint] if not args else [t for a in args for t in _flatten(a)]


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def test_every_field_of_the_trainer_tree_has_a_one_sentence_docstring():
    classes = config_classes()
    assert len(classes) >= 28
    missing = []
    for cls in classes:
        source = textwrap.dedent(inspect.getsource(cls))
        body = ast.parse(source).body[0].body
        own = {f.name for f in dataclasses.fields(cls)} & set(
            cls.__dict__.get("__annotations__", {})
        )
        documented = {
            node.target.id
            for node, after in zip(body, body[1:], strict=False)
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
            and after.value.value.strip()
        }
        missing += [f"{cls.__qualname__}.{name}" for name in sorted(own - documented)]
    assert missing == []


def test_every_config_class_is_keyword_only_and_slotted():
    for cls in config_classes():
        assert "__slots__" in cls.__dict__, cls
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
        if dataclasses.fields(cls):
            with pytest.raises(TypeError):
                cls(object())
        required = [f for f in dataclasses.fields(cls) if f.default is f.default_factory]
        if required:  # ModelSpec: name, flavor and model have no default
            continue
        instance = cls()
        with pytest.raises(AttributeError):
            instance.not_a_field = 1


def test_configurable_refuses_a_config_without_slots_or_kw_only():
    with pytest.raises(TypeError, match="slots=True"):

        class NoSlots(Configurable):
            @dataclasses.dataclass(kw_only=True)
            class Config(Configurable.Config):
                x: int = 1

    with pytest.raises(TypeError, match="keyword-only"):

        class Positional(Configurable):
            @dataclasses.dataclass(slots=True)
            class Config(Configurable.Config):
                x: int = 1

    with pytest.raises(TypeError, match="slots=True"):

        class NotRedecorated(Trainer):
            class Config(Trainer.Config):
                pass


def test_build_constructs_the_owner_with_runtime_arguments():
    class Greeter(Configurable):
        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config(Configurable.Config):
            name: str = "titan"

        def __init__(self, *, config, punctuation):
            self.text = f"hello {config.name}{punctuation}"

    assert Greeter.Config._owner is Greeter
    assert Greeter.Config(name="world").build(punctuation="!").text == "hello world!"
    with pytest.raises(TypeError):
        Greeter.Config(nmae="typo")


def test_components_say_clearly_when_they_cannot_be_built():
    with pytest.raises(NotBuildableError, match="the config has no model"):
        Trainer.Config().build()
    with pytest.raises(NotBuildableError, match="the config has no model"):
        FluxTrainer.Config().build()
    ft = FaultTolerantTrainer.Config()
    ft.fault_tolerance.enable = True
    with pytest.raises(NotBuildableError, match=r"fault tolerance \(TorchFT replica groups\)"):
        ft.build()
    with pytest.raises(NotBuildableError, match="no component to build"):
        Configurable.Config().build()


def test_owner_path_is_imported_on_build_and_a_missing_module_is_explained():
    @dataclasses.dataclass(kw_only=True, slots=True)
    class Lazy(Configurable.Config):
        _owner_path: typing.ClassVar[str | None] = "collections:OrderedDict"

    assert owner_of(Lazy).__name__ == "OrderedDict"

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Missing(Configurable.Config):
        _owner_path: typing.ClassVar[str | None] = "titan.no_such_module:Thing"

    with pytest.raises(NotBuildableError, match="not part of this titan yet"):
        Missing().build()


def test_subclass_configs_inherit_and_extend():
    ft = FaultTolerantTrainer.Config()
    assert isinstance(ft, Trainer.Config) and ft.fault_tolerance.enable is False
    assert FaultTolerantTrainer.Config._owner is FaultTolerantTrainer
    flux = FluxTrainer.Config()
    assert flux.tokenizer is None and flux.dataloader.dataset == "cc12m-test"


def test_the_config_tree_and_registries_never_import_torch():
    probe = (
        "import sys\n"
        "import titan.config, titan.trainer, titan.config.manager, titan.config.check\n"
        "import titan.config.serialize, titan.cli.validate_config, titan.cli.diff\n"
        "from titan.models import SUPPORTED_MODELS\n"
        "import importlib\n"
        "for family in SUPPORTED_MODELS:\n"
        "    importlib.import_module(f'titan.models.{family}.config_registry')\n"
        "import titan.models.flux.trainer, titan.experiments.ft.trainer, titan.migrate.plan.homes\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
