"""Tests for ``titan.models``: every flavor's config tree, the registries, and the config classes."""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import pathlib
import subprocess
import sys
import types
import typing

import pytest
from titan.schemas.flavors import FLAVORS, flavor_names

import titan.models
from tests import v022_flavors
from titan.config.configurable import Configurable, NotBuildableError
from titan.config.serialize import to_dict
from titan.models import FAMILY_ALIASES, SUPPORTED_MODELS, model_registry
from titan.models.common import Attention, BaseAttention, MoE
from titan.protocols.model_spec import ModelSpec

REPO = pathlib.Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "titan" / "models"
CONFIG_MODULES = {
    f: importlib.import_module(f"titan.models.{f}.model_config") for f in SUPPORTED_MODELS
}
FAMILY_FLAVORS = [(f, name) for f in SUPPORTED_MODELS for name in flavor_names(f)]
# The families every flavor of which has MoE layers.
MOE_FAMILIES = tuple(f for f in SUPPORTED_MODELS if all(x.moe for x in FLAVORS[f].values()))


# ----------------------------------------------------------------------------- flavors


@pytest.mark.parametrize(("family", "name"), FAMILY_FLAVORS)
def test_every_flavor_is_its_frozen_v022_model(family, name):
    spec = importlib.import_module(f"titan.models.{family}").model_registry(name)
    assert v022_flavors.changed_leaves(family, name, spec.model) == {}


@pytest.mark.parametrize("family", v022_flavors.families())
def test_every_v022_family_keeps_exactly_its_v022_flavors(family):
    assert flavor_names(family) == v022_flavors.flavor_names(family)


@pytest.mark.parametrize("family", SUPPORTED_MODELS)
def test_family_package_lists_every_flavor(family):
    package = importlib.import_module(f"titan.models.{family}")
    assert package.FLAVORS == flavor_names(family)


def test_llama4_keeps_the_irope_flavors_torchtitan_removed():
    assert {"debugmodel_irope", "17bx16e_irope", "17bx128e_irope"} <= set(
        titan.models.llama4.FLAVORS
    )
    assert model_registry("llama4", "17bx16e_irope").model.layer.attention.every_n_layers_nope == 4


def test_supported_models_and_aliases_match_schemas():
    folders = {p.parent.name for p in MODELS_DIR.glob("*/family.py")}
    assert set(SUPPORTED_MODELS) == folders and len(folders) >= 6
    for alias, family in FAMILY_ALIASES.items():
        assert flavor_names(alias) == flavor_names(family)
        assert model_registry(alias, "8B") == model_registry(family, "8B")


# ----------------------------------------------------------------------------- registries


@pytest.mark.parametrize("family", SUPPORTED_MODELS)
def test_model_registry_returns_fresh_equal_independent_specs(family):
    name = flavor_names(family)[0]
    first, second = model_registry(family, name), model_registry(family, name)
    assert isinstance(first, ModelSpec)
    assert (first.name, first.flavor) == (family, name)
    assert first == second and first is not second and first.model is not second.model
    first.model.rope.theta = 123.0
    if family == "flux":
        first.model.autoencoder.z_channels = 1
    else:
        first.model.layer.attention.n_heads = 1
    assert first != second
    assert to_dict(second.model) == to_dict(model_registry(family, name).model)
    assert v022_flavors.changed_leaves(family, name, second.model) == {}


def test_llama3_spec_names_its_training_functions():
    spec = model_registry("llama3", "8B")
    assert spec.capabilities.training_refusal is None
    assert spec.parallelize_fn == "titan.models.llama3.parallelize:parallelize_llama"
    assert callable(spec.resolve("build_loss_fn")())
    assert spec.resolve("state_dict_adapter").__name__ == "Llama3StateDictAdapter"
    assert spec.pipelining_fn is None and spec.post_optimizer_build_fn is None
    with pytest.raises(NotBuildableError, match="llama3 '8B' has no pipelining_fn"):
        spec.resolve("pipelining_fn")


@pytest.mark.parametrize(
    ("family", "name", "hint"),
    [
        ("llama3", "8b", "'8B'"),
        ("qwen3", "30B-A3", "'30B-A3B'"),
        ("llama4", "17bx16e_rope", "'17bx16e_irope'"),
        ("flux", "flux_dev", "'flux-dev'"),
        ("deepseek_v3", "617B", "'671B'"),
    ],
)
def test_unknown_flavor_lists_flavors_and_suggests(family, name, hint):
    with pytest.raises(ValueError, match=f"did you mean {hint}") as info:
        model_registry(family, name)
    assert f"unknown {family} flavor {name!r}" in str(info.value)
    assert all(known in str(info.value) for known in flavor_names(family))


def test_unknown_family_suggests():
    with pytest.raises(ValueError, match="did you mean 'llama3'") as info:
        model_registry("lama3", "8B")
    assert "deepseek_v3, flux, gpt_oss, llama3, llama4, qwen3" in str(info.value)
    with pytest.raises(ValueError, match="unknown model family 'mistral'"):
        model_registry("mistral", "7B")


# ----------------------------------------------------------------------------- building


def test_llama3_builds():
    import torch

    config = model_registry("llama3", "8B").model
    with torch.device("meta"):
        model = config.build()
    assert type(model).__module__ == "titan.models.llama3.model"
    assert sum(p.numel() for p in model.parameters()) == config.num_params()


def test_flux_builds():
    import torch

    with torch.device("meta"):
        model = model_registry("flux", "flux-debug").model.build()
    assert type(model).__module__ == "titan.models.flux.model"
    assert len(model.double_blocks) == 2 and len(model.single_blocks) == 2


def test_building_parts_builds_their_implementation():
    attention = Attention.Config().build(dim=64)
    assert type(attention).__module__ == "titan.models.common.attention_model"
    assert sum(p.numel() for p in attention.parameters()) == Attention.Config().num_params(64)
    with pytest.raises(NotBuildableError, match="has no component to build"):
        BaseAttention.Config().build()


# ----------------------------------------------------------------------------- config classes


def _config_classes() -> list[type]:
    modules = [
        importlib.import_module(f"titan.models.common.{m}")
        for m in ("rope", "attention", "feed_forward", "moe", "decoder")
    ] + list(CONFIG_MODULES.values())
    found = []
    for module in modules:
        for owner in vars(module).values():
            if (
                isinstance(owner, type)
                and owner.__module__ == module.__name__
                and issubclass(owner, Configurable)
            ):
                found.append(owner.__dict__["Config"])
    return found


CONFIG_CLASSES = _config_classes()


def test_config_classes_are_found():
    names = {c.__qualname__ for c in CONFIG_CLASSES}
    assert {"RoPE.Config", "MoE.Config", "Decoder.Config", "MLAttention.Config"} <= names
    assert {"FluxModel.Config", "AutoEncoder.Config", "GptOssMoE.Config"} <= names


@pytest.mark.parametrize("config", CONFIG_CLASSES, ids=lambda c: c.__qualname__)
def test_config_class_is_keyword_only_slotted_and_resolvable(config):
    assert "__slots__" in config.__dict__
    assert all(f.kw_only for f in dataclasses.fields(config))
    instance = config()  # every field has a default
    with pytest.raises(TypeError):
        config(1)
    with pytest.raises(AttributeError):
        instance.not_a_field = 1
    hints = typing.get_type_hints(config)
    assert {f.name for f in dataclasses.fields(config)} <= set(hints)
    assert config._owner_path is None or config._owner_path.startswith("titan.models.")
    # Never the torch-free class itself: only build() sets it, caching its import of _owner_path.
    if config._owner is not None:
        module, _, name = config._owner_path.partition(":")
        assert (config._owner.__module__, config._owner.__qualname__) == (module, name)


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name == "dataclass"


def _is_classvar(annotation: ast.expr) -> bool:
    return "ClassVar" in ast.unparse(annotation)


def test_every_config_field_has_a_docstring():
    missing = []
    for path in sorted(MODELS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            if not any(_is_dataclass_decorator(d) for d in node.decorator_list):
                continue
            body = node.body
            for index, statement in enumerate(body):
                if not isinstance(statement, ast.AnnAssign) or _is_classvar(statement.annotation):
                    continue
                following = body[index + 1] if index + 1 < len(body) else None
                documented = (
                    isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)
                )
                if not documented:
                    where = path.relative_to(REPO)
                    missing.append(f"{where}:{statement.lineno} {ast.unparse(statement.target)}")
    assert not missing, "fields without a docstring:\n" + "\n".join(missing)


def test_no_torch_on_import():
    families = ", ".join(f"titan.models.{f}" for f in SUPPORTED_MODELS)
    code = (
        f"import sys, titan.models, {families}\n"
        "for f in titan.models.SUPPORTED_MODELS:\n"
        "    titan.models.model_registry(f, titan.models.__dict__[f].FLAVORS[0])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


# ----------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("family", SUPPORTED_MODELS)
def test_default_config_is_small(family):
    model_class = titan.models.family_record(family).model_config
    count = model_class().num_params()
    assert count is None if family == "flux" else 0 < count < 50_000_000


# ----------------------------------------------------------------------------- model facts


@pytest.mark.parametrize(
    ("family", "name", "count"),
    [
        ("llama3", "8B", 8_030_261_248),
        ("llama3", "70B", 70_553_706_496),
        ("llama3", "405B", 405_853_388_800),
        ("qwen3", "0.6B", 596_049_920),  # tied output, q/k norms
        ("qwen3", "8B", 8_190_735_360),
        ("qwen3", "30B-A3B", 30_532_122_624),
        ("gpt_oss", "20b", 20_914_757_184),  # attention and expert biases, sinks
        ("gpt_oss", "120b", 116_829_156_672),
        # The published 671B counts the router's score-correction bias, a buffer in torchtitan.
        ("deepseek_v3", "671B", 671_026_419_200 - 58 * 256),
    ],
)
def test_num_params_matches_published_counts(family, name, count):
    assert model_registry(family, name).model.num_params() == count


def test_num_params_of_llama4_and_flux():
    assert model_registry("llama4", "17bx128e").model.num_params() == pytest.approx(400e9, 0.01)
    assert model_registry("llama4", "17bx16e").model.num_params() == pytest.approx(108e9, 0.01)
    assert model_registry("flux", "flux-dev").model.num_params() is None


def test_effective_hidden_dims():
    hidden = {n: model_registry("llama3", n).model for n in ("8B", "70B", "405B")}
    assert {n: c.layer.feed_forward.effective_hidden_dim(c.dim) for n, c in hidden.items()} == {
        "8B": 14336,
        "70B": 28672,
        "405B": 53248,
    }
    scout = model_registry("llama4", "17bx16e").model
    assert scout.layer.moe_hidden_dim(scout.dim) == 8192
    assert scout.layer.feed_forward.effective_hidden_dim(scout.dim) == 16384


def test_moe_layer_patterns():
    def moe_layers(family, name):
        config = model_registry(family, name).model
        return [config.layer.uses_moe(i) for i in range(config.n_layers)]

    assert moe_layers("llama4", "17bx128e")[:4] == [False, True, False, True]
    assert all(moe_layers("llama4", "17bx16e"))
    assert moe_layers("deepseek_v3", "671B")[:4] == [False, False, False, True]
    assert not any(moe_layers("qwen3", "8B")) and all(moe_layers("qwen3", "30B-A3B"))
    assert all(moe_layers("gpt_oss", "20b")) and not any(moe_layers("llama3", "8B"))


@pytest.mark.parametrize("family", SUPPORTED_MODELS)
def test_update_from_config_takes_seq_len_and_load_balance(family):
    config = model_registry(family, flavor_names(family)[0]).model
    trainer_config = types.SimpleNamespace(
        training=types.SimpleNamespace(seq_len=4096),
        debug=types.SimpleNamespace(moe_force_load_balance=True),
    )
    before = copy.deepcopy(config)
    config.update_from_config(trainer_config=trainer_config)
    if family == "flux":  # v0.2.2's flux reads nothing from the job config
        assert config == before
        return
    assert config.max_seq_len == 4096
    moe = config.layer.moe
    if family in MOE_FAMILIES:
        assert isinstance(moe, MoE.Config) and moe.force_load_balance is True
    else:
        assert moe is None  # the first flavor of llama3 and qwen3 is dense


def test_every_concrete_attention_counts_its_parameters():
    import importlib

    from titan.models import SUPPORTED_MODELS
    from titan.models.common.attention import BaseAttention

    for family in SUPPORTED_MODELS:  # import every family's attention classes
        importlib.import_module(f"titan.models.{family}")

    def subclasses(cls):
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    concrete = [c for c in subclasses(BaseAttention.Config) if c is not BaseAttention.Config]
    assert len(concrete) >= 4
    for cls in concrete:
        assert cls.num_params is not BaseAttention.Config.num_params, cls.__qualname__
        assert cls().num_params(64) > 0, cls.__qualname__
