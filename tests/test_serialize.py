"""titan.config.serialize: exact round trips through dict, JSON and TOML, safe loading, typed diff."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import math
import re
import sys
import tomllib
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from titan.components.checkpoint import CheckpointManager
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.components.optimizer import OptimizersContainer, OptimizersInBackwardContainer
from titan.components.quantization.float8 import Float8GroupedMMConverter, Float8LinearConverter
from titan.components.quantization.mx import MXGroupedMMConverter, MXLinearConverter
from titan.components.validate import Validator
from titan.config import (
    ActivationCheckpointConfig,
    CommConfig,
    CompileConfig,
    DebugConfig,
    ParallelismConfig,
    ProfilingConfig,
    TrainingConfig,
)
from titan.config.serialize import (
    ABSENT,
    Difference,
    diff,
    from_dict,
    from_json,
    from_toml,
    plain_dict,
    to_dict,
    to_json,
    to_toml,
)
from titan.experiments.ft.manager import FaultTolerance
from titan.experiments.ft.trainer import FaultTolerantTrainer
from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from titan.models.flux.trainer import FluxTrainer
from titan.protocols.model_converter import ModelConvertersContainer
from titan.protocols.model_spec import ModelSpec
from titan.protocols.module import BaseModel
from titan.trainer import Trainer

HOSTILE = [
    "",
    'say "hi"',
    "it's",
    "three \"\"\" quotes ''' here",
    "back\\slash \\n not a newline \\",
    "line\nbreak\r\n\ttab",
    "nul \x00 del \x7f esc \x1b",
    "ünïcødé ✓ 🎉 \u2028 \u0085 日本語",
    "{ __none__ = true }",
    '{"__class__": "os:system"}',
    "${HOME} $(rm -rf /) `x`",
]
FLOATS = [math.inf, -math.inf, math.nan, -0.0, 0.0, 1e308, 5e-324, 1.0, 0.1]


# --------------------------------------------------------------------------------------------
# An independent exactness check: every value with its exact type, floats bit for bit.


def shape(value: Any) -> Any:
    """A comparable picture of ``value`` that differs whenever a type or a float bit differs."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value), tuple((f.name, shape(getattr(value, f.name))) for f in fields))
    if type(value) in (list, tuple):
        return (type(value), tuple(shape(v) for v in value))
    if type(value) is dict:
        return (dict, frozenset((shape(k), shape(v)) for k, v in value.items()))
    if type(value) is float:
        return (float, "nan" if math.isnan(value) else value.hex())
    return (type(value), value)


def has_nan(value: Any) -> bool:
    """NaN != NaN, so ``==`` on a config holding a NaN is only true for the same object."""
    return "'nan'" in repr(shape(value))


def _standard_json(config: Any) -> Any:
    text = to_json(config)
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}"))
    return from_json(text, allowed_modules=[__name__])


CODECS = {
    "dict": lambda c: from_dict(
        json.loads(json.dumps(to_dict(c), allow_nan=False)), allowed_modules=[__name__]
    ),
    "json": _standard_json,
    "toml": lambda c: from_toml(to_toml(c), allowed_modules=[__name__]),
}


def assert_round_trips(config: Any) -> None:
    for name, codec in CODECS.items():
        back = codec(config)
        assert shape(back) == shape(config), name
        if not has_nan(config):
            assert back == config, name


# --------------------------------------------------------------------------------------------
# Configs


def every_section_changed() -> Trainer.Config:
    return Trainer.Config(
        model_spec=ModelSpec(name="toy", flavor="tiny", model=BaseModel.Config()),
        description="every section changed",
        hf_assets_path="./assets/hf/toy",
        dump_folder="/tmp/out",
        profiling=ProfilingConfig(enable_profiling=True, profile_freq=3),
        metrics=MetricsProcessor.Config(log_freq=1, enable_wandb=True),
        tokenizer=None,
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4", prefetch_factor=2),
        model_converters=ModelConvertersContainer.Config(
            converters=[Float8LinearConverter.Config(recipe_name="rowwise")],
            print_after_conversion=True,
        ),
        optimizer=OptimizersInBackwardContainer.Config(lr=3e-4, eps=1e-15),
        lr_scheduler=LRSchedulersContainer.Config(decay_ratio=0.8, decay_type="cosine"),
        training=TrainingConfig(steps=7, max_norm=2, dtype="bfloat16"),
        parallelism=ParallelismConfig(
            tensor_parallel_degree=2,
            module_fqns_per_model_part=[["tok_embeddings", "layers.0"], ["norm", "output"]],
            context_parallel_load_balancer=None,
        ),
        checkpoint=CheckpointManager.Config(enable=True, exclude_from_loading=["optimizer"]),
        activation_checkpoint=ActivationCheckpointConfig(mode="full", memory_budget=0.25),
        compile=CompileConfig(enable=True, components=["model"]),
        comm=CommConfig(mode="fake_backend"),
        validator=Validator.Config(enable=True, steps=5, local_batch_size=4),
        debug=DebugConfig(seed=42, save_config_file="config.json"),
    )


def test_every_section_of_the_changed_config_really_differs():
    changed = {d.path.split(".")[0] for d in diff(Trainer.Config(), every_section_changed())}
    assert changed == {f.name for f in dataclasses.fields(Trainer.Config)}


SEVERAL_CONVERTERS = ModelConvertersContainer.Config(
    converters=[
        Float8LinearConverter.Config(emulate=True, filter_fqns=["output", "auto_filter_small_kn"]),
        Float8GroupedMMConverter.Config(fqns="experts"),
        MXLinearConverter.Config(mxfp8_dim1_cast_kernel_choice="cuda"),
        MXGroupedMMConverter.Config(fqns=["experts", "shared"]),
    ]
)


@pytest.mark.parametrize(
    "config",
    [
        Trainer.Config(),
        every_section_changed(),
        Trainer.Config(model_converters=SEVERAL_CONVERTERS),
        FluxTrainer.Config(),
        FaultTolerantTrainer.Config(
            fault_tolerance=FaultTolerance.Config(
                enable=True,
                semi_sync_method="diloco",
                module_fqns_per_model_fragment=[["layers.0"], ["layers.1", "norm"]],
                fragment_update_alpha=0.5,
            )
        ),
    ],
    ids=["default", "every-section", "converters", "flux", "fault-tolerant"],
)
def test_configs_round_trip_exactly(config):
    assert_round_trips(config)


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_round_trip(text):
    assert_round_trips(
        Trainer.Config(
            description=text,
            checkpoint=CheckpointManager.Config(exclude_from_loading=[text, text * 2], folder=text),
        )
    )


@pytest.mark.parametrize("number", FLOATS, ids=repr)
def test_floats_keep_their_bits_and_type(number):
    config = Trainer.Config(optimizer=OptimizersContainer.Config(lr=number))
    assert_round_trips(config)
    assert type(CODECS["toml"](config).optimizer.lr) is float


def test_int_float_bool_tuple_list_none_dict_keep_their_types():
    config = Trainer.Config(
        training=TrainingConfig(max_norm=1, steps=2**70, gc_freq=True),
        compile=CompileConfig(components=("model", ("loss", None))),
        parallelism=ParallelismConfig(module_fqns_per_model_part=[(), [None], ["a"]]),
        checkpoint=CheckpointManager.Config(
            exclude_from_loading={"__class__": "os:system", "": None, 3: (1.0, math.inf), "k": {}}
        ),
        model_spec=None,
    )
    assert_round_trips(config)
    back = from_toml(to_toml(config))
    assert type(back.training.max_norm) is int and back.training.gc_freq is True
    assert back.compile.components == ("model", ("loss", None))


def test_the_dict_is_class_tagged_and_complete():
    data = to_dict(Trainer.Config(model_converters=SEVERAL_CONVERTERS))
    assert data["__class__"] == "titan.trainer:Trainer.Config"
    assert list(data)[1:] == [f.name for f in dataclasses.fields(Trainer.Config)]
    converters = data["model_converters"]["converters"]
    assert converters[1] == {
        "__class__": "titan.components.quantization.float8:Float8GroupedMMConverter.Config",
        "fqns": "experts",
    }
    assert data["optimizer"]["__class__"].endswith(":OptimizersContainer.Config")


def test_toml_spells_none_as_a_list_of_keys_and_as_an_inline_marker_in_arrays():
    config = Trainer.Config(compile=CompileConfig(components=["model", None]))
    document = tomllib.loads(to_toml(config))
    assert document["__none__"] == ["model_spec"]
    assert document["dataloader"]["__none__"] == ["dataset_path", "prefetch_factor"]
    assert document["compile"]["components"] == ["model", {"__none__": True}]


# --------------------------------------------------------------------------------------------
# Classes outside titan: enums, init=False fields, a user's Trainer.Config subclass


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass(kw_only=True, slots=True)
class Derived:
    base: int = 1
    doubled: int = dataclasses.field(init=False)
    colour: Colour = Colour.RED

    def __post_init__(self) -> None:
        self.doubled = self.base * 2


@dataclasses.dataclass(kw_only=True, slots=True)
class MyTrainerConfig(Trainer.Config):
    derived: Derived = dataclasses.field(default_factory=Derived)
    sizes: tuple[int, ...] = (1, 2)


def test_a_user_subclass_round_trips_when_its_module_is_allowed():
    config = MyTrainerConfig(derived=Derived(base=3), sizes=(4,))
    config.derived.doubled = 7  # set after __init__: the dump must restore it, not recompute it
    assert_round_trips(config)
    with pytest.raises(
        ValueError, match=re.escape(f"refusing to load '{__name__}:MyTrainerConfig'")
    ):
        from_dict(to_dict(config))


# --------------------------------------------------------------------------------------------
# Refusals


def test_from_dict_refuses_classes_outside_titan_without_importing_them(tmp_path, monkeypatch):
    (tmp_path / "planted_module.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass X: pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for tag in ("os:system", "planted_module:X", "titan_evil.x:Y"):
        with pytest.raises(ValueError, match=f"refusing to load '{tag}'"):
            from_dict({"__class__": tag})
    assert not (tmp_path / "imported").exists() and "planted_module" not in sys.modules


def test_from_dict_refuses_nested_bad_classes_naming_the_path():
    data = to_dict(Trainer.Config(model_converters=SEVERAL_CONVERTERS))
    data["model_converters"]["converters"][2] = {"__class__": "os:system"}
    with pytest.raises(ValueError, match=r"`model_converters\.converters\[2\]`: refusing"):
        from_dict(data)


@pytest.mark.parametrize(
    "tag",
    [
        "titan.trainer:Trainer",  # a class, not a dataclass
        "titan.config.configurable:owner_of",  # a function
        "titan.trainer:Trainer.Config.__init__",
        "titan.trainer:Trainer.Config.__class__",
    ],
)
def test_from_dict_refuses_titan_objects_that_are_not_dataclasses(tag):
    with pytest.raises(ValueError, match="is not a dataclass class"):
        from_dict({"__class__": tag})


def test_from_dict_accepts_only_a_class_under_its_own_name():
    # titan.trainer imports TrainingConfig; a name reached through an import is refused, so a
    # titan module importing a third-party dataclass cannot open a way to it.
    with pytest.raises(ValueError, match="names 'titan.config.configs:TrainingConfig'; refusing"):
        from_dict({"__class__": "titan.trainer:TrainingConfig"})


@pytest.mark.parametrize("tag", ["titan.trainer", "../titan:X", "titan.trainer:", 42])
def test_from_dict_refuses_malformed_tags(tag):
    with pytest.raises(ValueError, match="malformed class tag"):
        from_dict({"__class__": tag})


def test_from_dict_refuses_unknown_fields_naming_the_dotted_path():
    data = to_dict(Trainer.Config(model_converters=SEVERAL_CONVERTERS))
    data["training"]["stpes"] = 3
    with pytest.raises(ValueError, match=r"unknown field `training\.stpes`"):
        from_dict(data)
    data = to_dict(Trainer.Config(model_converters=SEVERAL_CONVERTERS))
    data["model_converters"]["converters"][0]["emulat"] = True
    with pytest.raises(ValueError, match=r"`model_converters\.converters\[0\]\.emulat`"):
        from_dict(data)


def test_from_dict_runs_post_init_checks_and_refuses_junk():
    data = to_dict(Trainer.Config())
    data["parallelism"]["context_parallel_load_balancer"] = ""
    with pytest.raises(ValueError, match=r"`parallelism`: cannot build .*must not be empty"):
        from_dict(data)
    with pytest.raises(ValueError, match="no __class__ tag"):
        from_dict({"training": {}})
    for junk in (
        {"__float__": "huge"},
        {"__tuple__": 1},
        {"__nope__": 1},
        {"__tuple__": [], "x": 1},
    ):
        with pytest.raises(ValueError, match="`description`"):
            from_dict({**to_dict(Trainer.Config()), "description": junk})


def test_plain_dict_is_untagged_and_names_the_model_spec():
    plain = plain_dict(every_section_changed())
    assert plain["model_spec"] == {"name": "toy", "flavor": "tiny"}
    assert plain["optimizer"]["lr"] == 3e-4 and "__class__" not in json.dumps(plain)


# --------------------------------------------------------------------------------------------
# Diff


def test_diff_reports_a_class_change_once_at_its_path():
    left = Trainer.Config()
    right = Trainer.Config(optimizer=OptimizersInBackwardContainer.Config(lr=1.0))
    assert diff(left, right) == [
        Difference("optimizer", OptimizersContainer.Config, OptimizersInBackwardContainer.Config)
    ]
    assert diff(left, right)[0].kind == "class"


def test_diff_compares_list_elements_by_index():
    one = ModelConvertersContainer.Config(converters=[Float8LinearConverter.Config()])
    two = ModelConvertersContainer.Config(
        converters=[Float8LinearConverter.Config(emulate=True), MXLinearConverter.Config()]
    )
    found = diff(Trainer.Config(model_converters=one), Trainer.Config(model_converters=two))
    assert [(d.path, d.kind) for d in found] == [
        ("model_converters.converters[0].emulate", "value"),
        ("model_converters.converters[1]", "added"),
    ]
    assert found[1].left is ABSENT
    swapped = ModelConvertersContainer.Config(converters=[MXLinearConverter.Config()])
    found = diff(Trainer.Config(model_converters=one), Trainer.Config(model_converters=swapped))
    assert [(d.path, d.kind) for d in found] == [("model_converters.converters[0]", "class")]


@pytest.mark.parametrize(
    ("left", "right"),
    [(1.0, 1), (True, 1), (["a"], ("a",)), (0.0, -0.0), (None, "")],
)
def test_diff_is_typed(left, right):
    found = diff(Trainer.Config(description=left), Trainer.Config(description=right))
    assert found == [Difference("description", left, right)]


def test_diff_of_equal_configs_is_empty_even_with_nan():
    assert diff(every_section_changed(), every_section_changed()) == []
    assert diff(Trainer.Config(description=math.nan), Trainer.Config(description=math.nan)) == []


def test_diff_across_trainer_classes_compares_the_shared_fields():
    found = diff(Trainer.Config(), FluxTrainer.Config())
    assert found[0] == Difference("", Trainer.Config, FluxTrainer.Config)
    kinds = {d.path: d.kind for d in found[1:]}
    assert kinds["tokenizer"] == "value" and kinds["dataloader"] == "class"
    assert kinds["encoder"] == kinds["validation"] == kinds["inference"] == "added"


# --------------------------------------------------------------------------------------------
# Every model flavor and every registry function of titan's model families


def _flavor_cases() -> list:
    from titan.models import SUPPORTED_MODELS

    return [
        pytest.param(family, flavor, id=f"{family}-{flavor}")
        for family in SUPPORTED_MODELS
        for flavor in importlib.import_module(f"titan.models.{family}").FLAVORS
    ]


def _registry_cases() -> list:
    from titan.config.manager import registry_functions
    from titan.models import SUPPORTED_MODELS

    return [
        pytest.param(function, id=name)
        for family in SUPPORTED_MODELS
        for name, function in registry_functions(
            importlib.import_module(f"titan.models.{family}.config_registry")
        ).items()
    ]


@pytest.mark.parametrize(("family", "flavor"), _flavor_cases())
def test_every_model_flavor_round_trips(family, flavor):
    spec = importlib.import_module(f"titan.models.{family}").model_registry(flavor)
    assert_round_trips(spec)
    assert_round_trips(Trainer.Config(model_spec=spec))


@pytest.mark.parametrize("function", _registry_cases())
def test_every_registry_function_round_trips(function):
    assert_round_trips(function())


# --------------------------------------------------------------------------------------------
# Property: random leaf mutations round-trip, and diff names exactly the mutated paths


def _leaves(config: Any, path: str = "") -> list[str]:
    found = []
    for f in dataclasses.fields(config):
        value, here = getattr(config, f.name), f"{path}{f.name}"
        if dataclasses.is_dataclass(value):
            found += _leaves(value, here + ".")
        else:
            found.append(here)
    return found


LEAVES = _leaves(Trainer.Config())
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
)


def _resolve(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


def _rebuildable(config: Any, paths: list[str]) -> bool:
    """Whether every config on the mutated paths still passes its own ``__post_init__``."""
    owners = {""} | {p.rpartition(".")[0] for p in paths}
    prefixes = {".".join(o.split(".")[:i]) for o in owners for i in range(len(o.split(".")) + 1)}
    for prefix in prefixes:
        node = _resolve(config, prefix) if prefix else config
        try:
            type(node)(
                **{f.name: getattr(node, f.name) for f in dataclasses.fields(node) if f.init}
            )
        except Exception:
            return False
    return True


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(LEAVES), VALUES, min_size=1, max_size=5))
def test_random_mutations_round_trip_and_diff_lists_exactly_them(mutations):
    default, config = Trainer.Config(), Trainer.Config()
    for path, value in mutations.items():
        assume(shape(value) != shape(_resolve(default, path)))
        owner, _, name = path.rpartition(".")
        setattr(_resolve(config, owner) if owner else config, name, value)
    assume(_rebuildable(config, list(mutations)))

    assert_round_trips(config)
    found = diff(default, config)
    assert sorted(d.path for d in found) == sorted(mutations)
    for d in found:
        assert shape(d.left) == shape(_resolve(default, d.path))
        assert shape(d.right) == shape(_resolve(config, d.path))
