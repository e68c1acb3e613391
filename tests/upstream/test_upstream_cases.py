"""The small cases of ``tests/test_upstream_target.py``, built in a real torchtitan 0.3.0.

That file checks the code ``titan-migrate --target torchtitan==0.3.0`` writes for each case;
here every case's module is imported in the upstream environment and its function called
(``build_runner.py``, with the model's sub-configs added to its dump: which attention, which
token dispatcher, which linear class and float8 scaling at each module), and the built values
are compared with what the legacy run used. A module that does not import, or a function that
raises, fails the test with every such case listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_upstream_target import CASES, Migration, migrate_case
from tests.upstream.building import build

RUNNER = Path(__file__).with_name("build_runner.py")

_WITH_MODEL_CONFIGS = r"""
import re, sys

sys.path.insert(0, sys.argv[1])
import build_runner

plain = build_runner.dump_model_spec


def dump_model_spec(spec):
    from torchtitan.config.configurable import Configurable

    out = plain(spec)
    out["configs"], out["float8_scaling"] = {}, {}
    layers = getattr(spec.model, "layers", None) or []
    out["rope_scaling"] = sorted(
        {str(getattr(getattr(getattr(l, "attention", None), "rope", None), "scaling", None)) for l in layers}
    )
    if spec.model is not None:
        for fqn, config, _parent, _attr in spec.model.traverse(Configurable.Config, recurse=True):
            fqn = re.sub(r"\.\d+(?=\.|$)", ".*", fqn)
            out["configs"][fqn] = type(config).__qualname__
            weight = getattr(getattr(config, "_torchao_config", None), "cast_config_weight", None)
            if weight is not None:
                out["float8_scaling"][fqn] = weight.scaling_granularity.value
    return out


build_runner.dump_model_spec = dump_model_spec
sys.argv = [build_runner.__file__, *sys.argv[2:]]
sys.exit(build_runner.main())
"""
"""``build_runner.py`` as it is, its ``ModelSpec`` dump extended with the model's sub-configs."""


@pytest.fixture(scope="module")
def built(upstream_python: Path, tmp_path_factory) -> dict[str, tuple[Migration, dict[str, Any]]]:
    """Case name -> (its migration, the config its function built in torchtitan 0.3.0)."""
    folder = tmp_path_factory.mktemp("upstream_cases")
    migrations = {name: migrate_case(name, folder) for name in CASES}
    modules = {}
    for name, migration in migrations.items():
        module = folder / name / "config_registry.py"
        module.parent.mkdir()
        module.write_text(migration.code, encoding="utf-8")
        modules[name] = module
    result = folder / "built.json"
    dumped = build(
        upstream_python,
        list(modules.values()),
        result,
        timeout=600,
        command=["-c", _WITH_MODEL_CONFIGS, str(RUNNER.parent)],
    )
    found, failures = {}, []
    for name, module in modules.items():
        entry = dumped[str(module)]
        if entry["error"]:
            failures.append(f"{name}: import failed\n{entry['error']}")
            continue
        (function,) = entry["functions"].values()
        if "error" in function:
            failures.append(f"{name}: {function['error']}")
            continue
        found[name] = (migrations[name], function["config"])
    assert not failures, "\n\n".join(failures)
    return found


def config(built, name: str) -> dict[str, Any]:
    return built[name][1]


def cls(value: dict[str, Any] | None) -> str | None:
    """``Qual.Name`` of a dumped config object."""
    return None if value is None else value["__class__"].rpartition(":")[2]


def model(built, name: str) -> dict[str, Any]:
    spec = config(built, name)["model_spec"]
    assert spec is not None, f"{name}: no model_spec"
    return spec


def test_an_eras_flavor_is_built_as_that_era_defined_it(built):
    """A llama3 8B of mid 2025 did not scale RoPE: every layer of 0.3.0's 8B says so, and the
    v0.2.2 file's 8B scales it (the llama 3.1 way) as 0.3.0's own 8B does."""
    migration, _ = built["era_rope"]
    assert "for layer in model_spec.model.layers:" in migration.code
    assert model(built, "era_rope")["rope_scaling"] == ["none"]
    assert not [d for d in migration.entry["diagnostics"] if d["code"] == "era-flavor-changed"]
    assert model(built, "debug")["rope_scaling"] == ["llama"]


def test_every_case_builds(built):
    assert set(built) == set(CASES)
    for name, (_, built_config) in built.items():
        assert built_config["__class__"] == "torchtitan.trainer:Trainer.Config", name
        assert built_config["training"]["disable_cuda_graphs"] is True, name


def test_llama3_debug_model(built):
    c = config(built, "debug")
    spec = model(built, "debug")
    assert (spec["name"], spec["flavor"]) == ("llama3", "debugmodel")
    assert spec["configs"]["layers.*.attention.inner_attention"] == "FlexAttention.Config"
    assert c["profiler"]["save_traces_folder"] == "profile_trace"
    assert c["profiler"]["save_memory_snapshot_folder"] == "memory_snapshot"
    assert (c["training"]["steps"], c["training"]["local_batch_size"]) == (10, 8)
    assert cls(c["loss"]) == "ChunkedLossWrapper.Config"
    assert c["loss"]["loss_fn"]["global_vocab_size"] == 2048  # the debug model's vocabulary
    assert cls(c["activation_checkpoint"]) == "SelectiveAC.Config"
    (group,) = c["optimizer"]["param_groups"]
    assert group["optimizer_name"] == "AdamW"
    assert group["optimizer_kwargs"] == {
        "lr": 8e-4,
        "betas": [0.9, 0.95],
        "eps": 1e-8,
        "weight_decay": 0.1,
    }


def test_activation_checkpoint_policies(built):
    assert cls(config(built, "ac_full")["activation_checkpoint"]) == "FullAC.Config"
    assert config(built, "ac_none")["activation_checkpoint"] is None
    selective = config(built, "ac_selective_op")["activation_checkpoint"]
    assert cls(selective) == "SelectiveAC.Config"
    assert selective["force_recompute_mm_shapes_by_fqns"] == ["output", "moe.router.gate"]
    assert cls(config(built, "ac_selective_2")["activation_checkpoint"]) == "SelectiveAC.Config"
    budget = config(built, "ac_memory_budget")["activation_checkpoint"]
    assert cls(budget) == "MemoryBudgetAC.Config"
    assert budget["memory_budget"] == 0.3


def _group(built, name: str) -> dict[str, Any]:
    (group,) = config(built, name)["optimizer"]["param_groups"]
    assert group["pattern"] == ".*", name
    return group


def test_optimizer_param_groups(built):
    adamw = _group(built, "opt_adamw")
    assert adamw["optimizer_name"] == "AdamW"
    assert adamw["optimizer_kwargs"] == {
        "lr": 3e-4,
        "betas": [0.9, 0.95],
        "eps": 1e-8,
        "weight_decay": 0.05,
    }
    adam = _group(built, "opt_adam")
    assert adam["optimizer_name"] == "Adam"
    assert adam["optimizer_kwargs"] == {
        "lr": 3e-4,
        "betas": [0.8, 0.95],
        "eps": 1e-8,
        "weight_decay": 0.1,
    }
    assert config(built, "opt_foreach")["optimizer"]["implementation"] == "foreach"
    assert _group(built, "opt_foreach")["optimizer_name"] == "AdamW"
    assert _group(built, "opt_early_step")["optimizer_kwargs"]["lr"] == 8e-4


def _linears(built, name: str) -> dict[str, str]:
    """Module name -> class of each linear (not of a module holding one: a fused q/k/v)."""
    linears = model(built, name)["linears"]
    return {
        fqn: c.rpartition(":")[2]
        for fqn, c in linears.items()
        if not any(other.startswith(fqn + ".") for other in linears)
    }


def test_float8_converts_with_rowwise_scaling(built):
    """The migrated run is rowwise even where v0.2.2 was tensorwise (reported as an error);
    the legacy skip-list ``output`` keeps 0.3.0's ``lm_head`` unconverted."""
    for name in ("float8_tensorwise", "float8_rowwise", "float8_compiled"):
        linears = _linears(built, name)
        assert set(linears.values()) == {"Float8Linear.Config"}, (name, linears)
        scaling = model(built, name)["float8_scaling"]
        assert set(scaling.values()) == {"axiswise"}, (name, scaling)
    linears = _linears(built, "float8_filter")
    assert linears.pop("lm_head") == "Linear.Config", linears
    assert set(linears.values()) == {"Float8Linear.Config"}, linears


def test_mx_converts_what_the_legacy_run_converted(built):
    """``output`` (v0.2.2's default skip-list) stays unconverted; every other linear is MXFP8.
    A skip-list naming a fused projection is reported, and then every linear is converted."""
    linears = _linears(built, "mx_default")
    assert linears.pop("lm_head") == "Linear.Config", (
        f"the migrated run converts lm_head, which the legacy run skipped: {linears}"
    )
    assert set(linears.values()) == {"MXFP8Linear.Config"}, linears
    assert set(_linears(built, "mx_wq").values()) == {"MXFP8Linear.Config"}


def test_attention_backends(built):
    inner = "layers.*.attention.inner_attention"
    for name, backend in (
        ("flex", "FlexAttention.Config"),
        ("sdpa", "FlexAttention.Config"),
        ("varlen", "VarlenAttention.Config"),
    ):
        spec = model(built, name)
        assert (spec["name"], spec["flavor"]) == ("llama3", "debugmodel"), name
        assert spec["configs"][inner] == backend, name


def test_moe_comm_backend(built):
    dispatcher = "layers.*.moe.routed_experts.token_dispatcher"
    spec = model(built, "qwen3_deepep")
    assert (spec["name"], spec["flavor"]) == ("qwen3", "debugmodel_moe")
    assert spec["configs"][dispatcher] == "DeepEPTokenDispatcher.Config"
    assert config(built, "qwen3_deepep")["parallelism"]["expert_parallel_degree"] == 2
    assert model(built, "expert_tp")["configs"][dispatcher] == "AllToAllTokenDispatcher.Config"


def test_a_family_upstream_lacks_builds_without_a_model(built):
    assert config(built, "llama4")["model_spec"] is None


def test_gone_keys_leave_the_rest_of_the_run(built):
    for name, tp in (("loss_parallel_tp2", 2), ("loss_parallel_tp1", 1), ("expert_tp", 2)):
        parallelism = config(built, name)["parallelism"]
        assert parallelism["tensor_parallel_degree"] == tp, name
        assert "disable_loss_parallel" not in parallelism
        assert "expert_tensor_parallel_degree" not in parallelism
    for name, enabled in (("validation_on", True), ("validation_off", False)):
        c = config(built, name)
        assert c["validator"]["enable"] is enabled, name
        assert c["training"]["seq_len"] == 2048, name
        assert "seq_len" not in c["validator"], name
