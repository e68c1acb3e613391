"""The capability record on ``ModelSpec`` and the one check that refuses what a family lacks."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from titan.schemas.flavors import flavor_names

from titan.components.quantization.float8 import Float8LinearConverter
from titan.config.configurable import NotBuildableError
from titan.models import SUPPORTED_MODELS, model_registry, unsupported_model
from titan.models.common.registry import deferred_training
from titan.models.llama3.config_registry import llama3_debugmodel
from titan.protocols.model_spec import FEATURES, Capabilities, ModelSpec
from titan.trainer import Trainer


def _config(spec: ModelSpec | None = None, **sections) -> Trainer.Config:
    """llama3's debug config with ``spec`` as its model and ``sections`` edited in place."""
    config = llama3_debugmodel()
    if spec is not None:
        config.model_spec = spec
    for path, value in sections.items():
        section, _, field = path.partition("__")
        setattr(getattr(config, section), field, value)
    return config


def _with(spec: ModelSpec, **capabilities) -> ModelSpec:
    return dataclasses.replace(
        spec, capabilities=dataclasses.replace(spec.capabilities, **capabilities)
    )


def test_every_family_record_is_a_capabilities_record_and_llama3_trains():
    for family in SUPPORTED_MODELS:
        spec = model_registry(family, flavor_names(family)[0])
        assert isinstance(spec.capabilities, Capabilities)
    llama3 = model_registry("llama3", "debugmodel").capabilities
    assert llama3.training_refusal is None
    assert (llama3.fsdp, llama3.ddp, llama3.tp, llama3.compile, llama3.pp, llama3.cp) == (True,) * 6
    assert not (llama3.ep or llama3.etp)


def test_a_feature_for_every_capability_field():
    named = {feature.name for feature in FEATURES}
    # Not features a config can ask for: why a family does not train, and how its loaders
    # are built.
    unrefused = {"training_refusal", "loaders_read_assets"}
    fields = {f.name for f in dataclasses.fields(Capabilities)} - unrefused
    assert named == fields


@pytest.mark.parametrize("family", [f for f in SUPPORTED_MODELS if f != "llama3"])
def test_a_family_that_does_not_train_is_refused_once_with_its_reason(family):
    spec = model_registry(family, flavor_names(family)[0])
    if spec.capabilities.training_refusal is None:
        spec = _with(spec, training_refusal=deferred_training(family))  # as before it landed
    config = _config(spec, parallelism__tensor_parallel_degree=2, compile__enable=True)
    (refusal,) = spec.refusals(config, world_size=2)
    assert refusal.key == "model_spec"
    assert f"does not train {family} yet (it trains the language models: " in refusal.message
    with pytest.raises(NotBuildableError, match=f"{family} '.*': titan-train does not train"):
        spec.check_capabilities(config, world_size=2)


def test_flux_trains_through_its_own_trainer():
    spec = model_registry("flux", "flux-debug")
    assert spec.capabilities.training_refusal is None
    # FluxTrainer shards the model itself (parallelize_flux): the generic TP-plan hook stays unset.
    assert spec.parallelize_fn is None
    assert spec.build_loss_fn == "titan.models.flux.loss:build_mse_loss"
    assert spec.capabilities.loaders_read_assets


def test_llama3_debug_config_runs_as_it_is():
    config = _config()
    assert config.model_spec.refusals(config, world_size=8) == []


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("expert_parallel_degree", "expert parallel"),
    ],
)
def test_degrees_no_family_has_are_refused_by_name(field, words):
    config = _config(**{f"parallelism__{field}": 2})
    (refusal,) = config.model_spec.refusals(config, world_size=8)
    assert refusal.key == f"parallelism.{field}"
    assert refusal.message.startswith(
        f"{words} is not supported by titan-train yet (parallelism.{field} = 2)"
    )
    assert refusal.hint == f"set parallelism.{field} to 1"


TRAINABLE = [
    family
    for family in SUPPORTED_MODELS
    if model_registry(family, flavor_names(family)[0]).capabilities.training_refusal is None
]


# Flux trains without context parallel (its FluxTrainer has no sequence split of image tokens).
@pytest.mark.parametrize("family", [family for family in TRAINABLE if family != "flux"])
def test_every_trainable_language_family_runs_context_parallel(family):
    spec = model_registry(family, flavor_names(family)[0])
    config = _config(spec, parallelism__context_parallel_degree=2)
    assert spec.refusals(config, world_size=2) == []


def test_a_family_record_without_cp_refuses_it_by_name():
    # A custom family opts in once its attention runs the CP view (titan.models.common.cp_attention).
    spec = _with(model_registry("llama3", "debugmodel"), cp=False)
    config = _config(spec, parallelism__context_parallel_degree=2)
    (refusal,) = spec.refusals(config, world_size=2)
    assert refusal.key == "parallelism.context_parallel_degree"
    assert refusal.message.startswith(
        "context parallel is not supported by titan-train yet "
        "(parallelism.context_parallel_degree = 2)"
    )
    assert refusal.hint == "set parallelism.context_parallel_degree to 1"


def test_the_shard_degree_left_over_counts_the_context_parallel_ranks():
    spec = _with(model_registry("llama3", "debugmodel"), fsdp=False)
    config = _config(spec, parallelism__context_parallel_degree=2)
    (refusal,) = spec.refusals(config, world_size=8)
    assert "(parallelism.data_parallel_shard_degree = 4)" in refusal.message
    assert spec.refusals(config, world_size=2) == []


def test_pipeline_parallel_is_one_keyword_of_the_family_record():
    config = _config(parallelism__pipeline_parallel_degree=2)
    assert config.model_spec.refusals(config, world_size=8) == []
    spec = _with(model_registry("llama3", "debugmodel"), pp=False)
    config = _config(spec, parallelism__pipeline_parallel_degree=2)
    (refusal,) = spec.refusals(config, world_size=8)
    assert refusal.key == "parallelism.pipeline_parallel_degree"
    assert refusal.message == (
        "pipeline parallel is not supported by titan-train yet "
        "(parallelism.pipeline_parallel_degree = 2) for llama3"
    )
    assert refusal.hint == "set parallelism.pipeline_parallel_degree to 1"


def test_a_family_record_without_tp_refuses_tp_and_names_the_key():
    spec = _with(model_registry("llama3", "debugmodel"), tp=False)
    config = _config(spec, parallelism__tensor_parallel_degree=2)
    with pytest.raises(NotBuildableError) as raised:
        spec.check_capabilities(config, world_size=2)
    assert str(raised.value) == (
        "tensor parallel is not supported by titan-train yet "
        "(parallelism.tensor_parallel_degree = 2) for llama3; "
        "set parallelism.tensor_parallel_degree to 1"
    )
    allowed = _with(spec, tp=True)
    assert allowed.refusals(config, world_size=2) == []


def test_ep_is_one_keyword_away():
    spec = model_registry("llama3", "debugmodel")
    config = _config(spec, parallelism__expert_parallel_degree=2)
    assert [r.key for r in spec.refusals(config, world_size=2)] == [
        "parallelism.expert_parallel_degree"
    ]
    assert _with(spec, ep=True).refusals(config, world_size=2) == []


def test_expert_tensor_parallel_is_asked_only_under_expert_parallel():
    # Without EP there are no expert shards for it to split (torchtitan reads it only with EP):
    # llama4_17bx16e.toml sets it to 8 beside TP 8 and runs as TP 8.
    spec = model_registry("llama4", "debugmodel")
    alone = _config(
        spec, parallelism__tensor_parallel_degree=2, parallelism__expert_tensor_parallel_degree=2
    )
    assert spec.refusals(alone, world_size=2) == []
    config = _config(
        spec,
        parallelism__tensor_parallel_degree=2,
        parallelism__expert_parallel_degree=2,
        parallelism__expert_tensor_parallel_degree=2,
    )
    # llama4 runs it; gpt_oss (experts with biases and their own TP split) does not yet.
    assert spec.refusals(config, world_size=4) == []
    gpt_oss = model_registry("gpt_oss", "debugmodel")
    config = _config(
        gpt_oss,
        parallelism__tensor_parallel_degree=2,
        parallelism__expert_parallel_degree=2,
        parallelism__expert_tensor_parallel_degree=2,
    )
    (refusal,) = gpt_oss.refusals(config, world_size=4)
    assert refusal.key == "parallelism.expert_tensor_parallel_degree"
    assert refusal.message.startswith(
        "expert tensor parallel is not supported by titan-train yet "
        "(parallelism.expert_tensor_parallel_degree = 2)"
    )


def test_data_parallel_refusals_follow_the_resolved_degrees():
    spec = _with(model_registry("llama3", "debugmodel"), fsdp=False, ddp=False)
    leftover = _config(spec)  # data_parallel_shard_degree = -1
    assert spec.refusals(leftover, world_size=1) == []
    (fsdp,) = spec.refusals(leftover, world_size=4)
    assert fsdp.key == "parallelism.data_parallel_shard_degree"
    assert "(parallelism.data_parallel_shard_degree = 4)" in fsdp.message
    ddp = _config(
        spec,
        parallelism__data_parallel_replicate_degree=2,
        parallelism__data_parallel_shard_degree=1,
    )
    (refusal,) = spec.refusals(ddp, world_size=2)
    assert refusal.key == "parallelism.data_parallel_replicate_degree"
    hsdp = _config(
        _with(spec, fsdp=True),
        parallelism__data_parallel_replicate_degree=2,
        parallelism__data_parallel_shard_degree=2,
    )
    assert hsdp.model_spec.refusals(hsdp, world_size=4) == []


def test_features_are_refused_each_with_its_key():
    spec = _with(
        model_registry("llama3", "debugmodel"),
        float8=False,
        compile=False,
        activation_checkpoint=False,
        hf_checkpoints=False,
    )
    config = _config(spec, compile__enable=True, activation_checkpoint__mode="full")
    config.model_converters.converters = [Float8LinearConverter.Config()]
    config.checkpoint.last_save_in_hf = True
    keys = [r.key for r in spec.refusals(config, world_size=1)]
    assert keys == [
        "model_converters.converters",
        "compile.enable",
        "activation_checkpoint.mode",
        "checkpoint.last_save_in_hf",
    ]
    config.compile.components = ["loss"]  # compiling the loss only is not the model's business
    assert "compile.enable" not in [r.key for r in spec.refusals(config, world_size=1)]


def test_a_model_without_a_family_is_refused_by_name():
    spec = unsupported_model("vlm", "debugmodel")
    (refusal,) = spec.refusals(_config(spec), world_size=1)
    assert "titan has no `vlm` model family" in refusal.message


def test_the_capability_check_does_not_import_torch():
    probe = (
        "import sys\n"
        "from titan.models.llama3.config_registry import llama3_debugmodel\n"
        "config = llama3_debugmodel()\n"
        "config.parallelism.expert_parallel_degree = 2\n"  # llama3 has no experts
        "assert config.model_spec.refusals(config, world_size=2)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("missing", ["tp", "training"])
def test_build_run_refuses_before_any_output_folder_exists(tmp_path, monkeypatch, missing):
    from titan.training.setup import build_run

    spec = model_registry("llama3", "debugmodel")
    if missing == "tp":
        spec, key = _with(spec, tp=False), "parallelism.tensor_parallel_degree"
    else:
        spec, key = _with(spec, training_refusal="not today"), "'debugmodel': not today"
    config = _config(spec, parallelism__tensor_parallel_degree=2)
    config.dump_folder = str(tmp_path / "run")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(NotBuildableError, match=key):
        build_run(config)
    assert not (tmp_path / "run").exists()


def _config_nodes(node):
    """``node`` and every config below it in the tree."""
    yield node
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _config_nodes(value)


@pytest.mark.parametrize("family", SUPPORTED_MODELS)
def test_a_family_that_trains_has_every_module_its_configs_name(family):
    from titan.config.configurable import owner_of

    for name in flavor_names(family):
        spec = model_registry(family, name)
        if spec.capabilities.training_refusal is not None:
            assert spec.parallelize_fn is None and spec.build_loss_fn is None
            continue
        assert spec.build_loss_fn is not None
        assert spec.parallelize_fn is not None or not spec.capabilities.tp
        for node in _config_nodes(spec.model):
            if type(node)._owner_path is not None:
                assert owner_of(type(node)).__name__ in type(node)._owner_path


@pytest.mark.parametrize(
    "sections",
    [
        {"parallelism__tensor_parallel_degree": "2"},
        {"parallelism__data_parallel_shard_degree": None},
        {
            "parallelism__pipeline_parallel_degree": True,
            "parallelism__context_parallel_degree": 2.0,
        },
        {
            "parallelism__expert_parallel_degree": [2],
            "parallelism__expert_tensor_parallel_degree": 2,
        },
        {"compile__enable": "yes", "compile__components": 5},
        {"activation_checkpoint__mode": 3},
        {"model_converters__converters": 7},
        {"checkpoint__last_save_in_hf": "true"},
    ],
)
def test_values_of_the_wrong_type_ask_for_no_feature(sections):
    """The capability check reads a config beside its type check: a wrongly typed value is that
    check's finding, not a feature asked for, and never a crash (a str degree made titan-train
    --preflight stop on "internal error: TypeError")."""
    spec = dataclasses.replace(model_registry("llama3", "debugmodel"), capabilities=Capabilities())
    asked = {r.key for r in spec.refusals(_config(spec, **sections), world_size=4)}
    # What the unedited config asks for (FSDP on four ranks, selective checkpointing), at most.
    assert asked <= {r.key for r in spec.refusals(_config(spec), world_size=4)}
    assert not asked & {f"{k.replace('__', '.')}" for k in sections}
