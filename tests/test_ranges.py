"""Numbers outside their range are refused alike in a TOML, a registry function, on the command
line of ``titan-validate --config`` and of ``titan-train`` (before anything is built).

The ranges are declared once as pydantic constraints in ``schemas/legacy.py``; the generated table
``titan.schemas.legacy_spec.LEGACY_RANGES`` must say exactly what pydantic enforces, and the registry
check reaches every ranged key through the migration's homes.
"""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
import typing
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError
from titan.schemas import ranges
from titan.schemas.legacy import JobConfig
from titan.schemas.legacy_spec import LEGACY_RANGES
from titan.schemas.spec_codegen import ranges_from_model
from titan.schemas.typecheck import matches

from tests.test_validate_config import registry, run
from tests.training_runs import DEBUG_TOML, REPO, run_train

PROBES = [-(2**63) - 1, -2, -1, 0, 1, 2, 2**63, -1.5, -0.0, 0.5, 0.999, 1.0, 1.5, 1e300]
PROBES += [math.inf, -math.inf, math.nan]


def _field_info(key: str):
    model: typing.Any = JobConfig
    *sections, name = key.split(".")
    for part in sections:
        model = model.model_fields[part].annotation
    return model.model_fields[name]


def test_the_generated_table_is_current():
    assert ranges_from_model(JobConfig) == LEGACY_RANGES, "stale: run `make schema`"


@pytest.mark.parametrize("key", sorted(LEGACY_RANGES))
def test_the_table_says_what_pydantic_enforces(key):
    info = _field_info(key)
    adapter = TypeAdapter(typing.Annotated[info.annotation, info])
    for value in PROBES:
        if not matches(value, info.annotation):
            continue  # a float for an int is a type error, not a range one
        try:
            adapter.validate_python(value, strict=True)
            accepted = True
        except ValidationError:
            accepted = False
        in_int64 = not isinstance(value, int) or ranges.INT64_MIN <= value <= ranges.INT64_MAX
        assert (ranges.problem(value, LEGACY_RANGES[key]) is None) == (accepted and in_int64), (
            key,
            value,
        )


def test_every_ranged_key_is_checked_in_the_registry_form():
    from titan.migrate.plan import homes

    from titan.config.check import _range_paths

    checked = dict(_range_paths())
    assert {"training.steps", "optimizer.lr", "validator.steps", "dataloader.num_workers"} <= set(
        checked
    )
    for key, bounds in LEGACY_RANGES.items():
        home = homes.home(key)
        assert home is not None and home.kind in ("same", "moved"), key  # none is dropped
        for path in (home.path, *home.also):
            assert checked[path] == bounds, (key, path)


def test_the_json_schema_file_carries_the_ranges():
    document = json.loads(
        (REPO / "schemas" / "json" / "torchtitan-v0.2.2.schema.json").read_text(encoding="utf-8")
    )
    training = document["properties"]["training"]["properties"]
    assert training["steps"]["minimum"] == 1
    assert [o.get("exclusiveMinimum") for o in training["max_norm"]["anyOf"]] == [0, 0]
    assert "gt" not in json.dumps(training["max_norm"])
    beta = document["properties"]["optimizer"]["properties"]["beta1"]
    assert (beta["minimum"], beta["exclusiveMaximum"]) == (0, 1)


# (legacy TOML section, key, TOML value, registry path, Python value, hint)
CASES = [
    ("training", "steps", "-1", "training.steps", "-1", "must be ≥ 1"),
    ("training", "seq_len", str(2**76), "training.seq_len", str(2**76), "signed 64-bit"),
    ("training", "max_norm", "-inf", "training.max_norm", 'float("-inf")', "must be > 0"),
    ("optimizer", "lr", "nan", "optimizer.lr", 'float("nan")', "must be a finite number ≥ 0"),
    ("optimizer", "lr", "inf", "optimizer.lr", 'float("inf")', "must be a finite number ≥ 0"),
    ("training", "local_batch_size", "-8", "training.local_batch_size", "-8", "must be ≥ 1"),
    ("lr_scheduler", "warmup_steps", "-5", "lr_scheduler.warmup_steps", "-5", "must be ≥ 0"),
    ("lr_scheduler", "decay_ratio", "1.25", "lr_scheduler.decay_ratio", "1.25", "≤ 1"),
    ("validation", "freq", "0", "validator.freq", "0", "must be ≥ 1"),
    ("training.dataloader", "num_workers", "-1", "dataloader.num_workers", "-1", "must be ≥ 0"),
]
CONFIG_CLASSES = {
    "training": ("titan.config", "TrainingConfig"),
    "optimizer": ("titan.components.optimizer", "OptimizersContainer.Config"),
    "lr_scheduler": ("titan.components.lr_scheduler", "LRSchedulersContainer.Config"),
    "validator": ("titan.components.validate", "Validator.Config"),
}


@pytest.mark.parametrize(("section", "key", "toml", "path", "python", "hint"), CASES)
def test_both_forms_refuse_the_value(in_tmp, section, key, toml, path, python, hint):
    (in_tmp / "job.toml").write_text(f"[{section}]\n{key} = {toml}\n", encoding="utf-8")
    code, out, err = run("job.toml")
    assert code == 1 and "Traceback" not in out + err, out + err
    assert f"job.toml:2:1: error[out-of-range] `{section}.{key}` is " in out, out
    assert hint in out
    if path.startswith("dataloader."):
        return  # set through the validator's loader below; the TOML form is what matters here
    owner, _, field = path.partition(".")
    module, cls = CONFIG_CLASSES[owner]
    registry(
        in_tmp,
        f"""\
        from {module} import {cls.split(".")[0]}


        def mine():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"),
                {owner}={cls}({field}={python}),
            )
        """,
    )
    code, out, err = run("--config", "mine")
    assert code == 1 and "Traceback" not in out + err, out + err
    assert f"error[out-of-range] `{path}` is " in out and hint in out, out
    assert "config_registry.py:" in out  # the span is the function's source line


def test_registry_flags_are_checked_too():
    code, out, _ = run("--config", "llama3_debugmodel", "--training.steps", "-1")
    assert code == 1 and "<command line>:1:28: error[out-of-range] `training.steps` is -1" in out
    code, out, _ = run("--config", "llama3_debugmodel", "--optimizer.lr", "nan")
    assert code == 1 and "`optimizer.lr` is nan; it must be a finite number ≥ 0" in out


@pytest.mark.parametrize("spelling", ["separate", "equals"])
def test_a_flag_with_more_digits_than_python_reads_is_a_usage_error(spelling):
    digits = "9" * 5000
    flags = [f"--training.steps={digits}"] if spelling == "equals" else ["--training.steps", digits]
    code, out, err = run("--config", "llama3_debugmodel", *flags)
    assert code == 2, out + err
    assert "--training.steps is a whole number of 5000 digits" in err
    assert "set_int_max_str_digits" not in out + err  # Python's advice is not the user's fix


def test_numbers_too_long_to_print_are_shown_by_their_first_digits():
    """Python refuses ``str()`` of an integer past 4,300 digits: messages never call it."""
    assert ranges.shown_number(10**30 - 1) == "9" * 30
    assert ranges.shown_number(10**30) == "100000… (31 digits)"
    assert ranges.shown_number(-(123456789 * 10**5000)) == "-123456… (5009 digits)"
    assert ranges.shown_number(1.5) == "1.5"
    assert ranges.shown_value([10**5000, "x" * 500]).startswith("[100000… (5001 digits), 'xxx")
    assert len(ranges.shown_value("x" * 10_000)) < 200


def test_cross_field_checks_skip_numbers_past_64_bits(in_tmp):
    """Out-of-range numbers are the range check's findings; the batch-size and degree checks do
    not multiply them (the product of two 4,300-digit numbers cannot even be printed)."""
    huge = "9" * 4300
    (in_tmp / "job.toml").write_text(
        f"[training]\nglobal_batch_size = {2**76}\nlocal_batch_size = {huge}\ndtype = {huge}\n"
        f"[parallelism]\ndata_parallel_shard_degree = {2**76}\n",
        encoding="utf-8",
    )
    code, out, err = run("job.toml")
    assert code == 1 and "internal error" not in out + err, out + err
    assert out.count("error[out-of-range]") == 3 and "999999… (4300 digits)" in out, out
    assert "got integer 999999… (4300 digits)" in out and "batch-size" not in out
    registry(
        in_tmp,
        """\
        def mine():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"),
                training=TrainingConfig(
                    local_batch_size=10**5000, global_batch_size=10**5000, dtype=[10**5000]
                ),
            )
        """,
    )
    code, out, err = run("--config", "mine")
    assert code == 1 and "internal error" not in out + err, out + err
    assert "`training.local_batch_size` is 100000… (5001 digits); it must fit" in out, out
    assert "`training.dtype` is [100000… (5001 digits)]" in out, out


def test_sentinels_upstream_gives_a_meaning_pass(in_tmp):
    (in_tmp / "job.toml").write_text(
        textwrap.dedent(
            """\
            [training]
            global_batch_size = -1
            max_norm = inf
            [checkpoint]
            keep_latest_k = 0
            load_step = -1
            [validation]
            steps = -1
            [parallelism]
            data_parallel_shard_degree = -1
            """
        ),
        encoding="utf-8",
    )
    code, out, _ = run("job.toml")
    assert code == 0, out


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_train(list(args), cwd=cwd, timeout=300)


@pytest.mark.parametrize("form", ["toml", "registry"])
def test_titan_train_refuses_before_building_anything(tmp_path, form):
    dump = tmp_path / "out"
    if form == "toml":
        args = ["--job.config_file", str(DEBUG_TOML), "--job.dump_folder", str(dump)]
    else:
        args = ["--config", "llama3_debugmodel", "--dump_folder", str(dump)]
    done = _train(*args, "--training.steps", "-1", "--optimizer.lr", "nan", cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert "error[out-of-range] `training.steps` is -1; it must be ≥ 1" in output
    assert "`optimizer.lr` is nan" in output
    assert not dump.exists()  # refused before the run made its folder
    assert "step:" not in output.lower()


# ----------------------------------------------------- ranges declared on titan's config classes

# (family, the change to the model spec's tree, registry path, message after the path, hint)
MODEL_CASES = [
    ("llama3", "spec.model.dim = -5", "model_spec.model.dim", "is -5", "must be ≥ 1"),
    ("llama3", "spec.model.n_layers = 0", "model_spec.model.n_layers", "is 0", "must be ≥ 1"),
    ("qwen3", "spec.model.vocab_size = -1", "model_spec.model.vocab_size", "is -1", "must be ≥ 1"),
    (
        "llama3",
        "spec.model.layer.attention.n_heads = 0",
        "model_spec.model.layer.attention.n_heads",
        "is 0",
        "must be ≥ 1",
    ),
    (
        "llama4",
        "spec.model.layer.attention.n_kv_heads = -2",
        "model_spec.model.layer.attention.n_kv_heads",
        "is -2",
        "must be ≥ 1",
    ),
    (
        "llama3",
        "spec.model.layer.feed_forward.multiple_of = 0",
        "model_spec.model.layer.feed_forward.multiple_of",
        "is 0",
        "must be ≥ 1",
    ),
    (
        "qwen3",
        "spec.model.layer.feed_forward.hidden_dim = -64",
        "model_spec.model.layer.feed_forward.hidden_dim",
        "is -64",
        "must be ≥ 1",
    ),
    (
        "llama3",
        "spec.model.norm_eps = 0.0",
        "model_spec.model.norm_eps",
        "is 0.0",
        "must be a finite number > 0",
    ),
    (
        "gpt_oss",
        'spec.model.norm_eps = float("nan")',
        "model_spec.model.norm_eps",
        "is nan",
        "must be a finite number > 0",
    ),
    (
        "llama3",
        "spec.model.rope.theta = -10000.0",
        "model_spec.model.rope.theta",
        "is -10000.0",
        "must be a finite number > 0",
    ),
    (
        "deepseek_v3",
        "spec.model.layer.attention.kv_lora_rank = 0",
        "model_spec.model.layer.attention.kv_lora_rank",
        "is 0",
        "must be ≥ 1",
    ),
    (
        "deepseek_v3",
        "spec.model.layer.n_dense_layers = -1",
        "model_spec.model.layer.n_dense_layers",
        "is -1",
        "must be ≥ 0",
    ),
    (
        "deepseek_v3",
        "spec.model.layer.moe.num_experts = 0",
        "model_spec.model.layer.moe.num_experts",
        "is 0",
        "must be ≥ 1",
    ),
]


@pytest.mark.parametrize(("family", "change", "path", "value", "hint"), MODEL_CASES)
def test_a_model_config_size_out_of_its_range_is_refused(in_tmp, family, change, path, value, hint):
    (in_tmp / "config_registry.py").write_text(
        f"from titan.models.{family} import model_registry\n"
        "from titan.trainer import Trainer\n\n\n"
        "def mine():\n"
        '    spec = model_registry("debugmodel")\n'
        f"    {change}\n"
        "    return Trainer.Config(model_spec=spec)\n",
        encoding="utf-8",
    )
    code, out, err = run("--config", "mine", "--format", "json")
    assert code == 1 and "Traceback" not in out + err, out + err
    found = json.loads(out)["diagnostics"]
    assert [(d["code"], d["path"], d["message"], d["hint"]) for d in found] == [
        ("out-of-range", path, f"`{path}` {value}; it {hint}", hint)
    ]
    assert found[0]["file"].endswith("config_registry.py")


def test_every_size_of_a_model_config_declares_its_range():
    """Every number of titan's model config classes (decoders, attention, feed-forward, MoE,
    rope) has a declared range, but the few whose every value means something."""
    import dataclasses
    import importlib

    from titan.config.configurable import Configurable, field_ranges

    unbounded = {
        "route_scale",  # a scale of the routing scores: any sign is arithmetic
        "load_balance_coeff",  # the MoE module refuses a non-positive rate itself
        "num_limited_groups",  # 1..num_expert_groups: the moe-routing rule
        "beta_fast",  # YaRN's and NTK's constants: any number is a curve
        "beta_slow",
        "mscale",
        "ntk_alpha",
        "ntk_beta",
        "swiglu_limit",
        "shift_factor",  # the autoencoder's latent shift: any sign
        "max_batch_size",  # v0.2.2's inference cache size, unused in training
        "ch_mult",  # tuples of sizes, not numbers
        "axes_dim",
    }

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    from titan.models import SUPPORTED_MODELS
    from titan.models.common.decoder import Decoder

    for family in SUPPORTED_MODELS:
        importlib.import_module(f"titan.models.{family}")  # every family's configs

    missing = []
    for cls in subclasses(Configurable.Config):
        module = cls.__module__
        if not (module.endswith(".model_config") or module.startswith("titan.models.common.")):
            continue  # a family's data loader or trainer configs are not its model's
        declared = field_ranges(cls)
        for field in dataclasses.fields(cls):
            numeric = {int, float} & set(typing.get_args(typing.get_type_hints(cls)[field.name]))
            numeric |= {int, float} & {typing.get_type_hints(cls)[field.name]}
            if numeric and field.name not in declared and field.name not in unbounded:
                missing.append(f"{cls.__qualname__}.{field.name}")
    assert sorted(set(missing)) == []
    assert {"dim", "n_layers", "vocab_size", "norm_eps"} <= set(field_ranges(Decoder.Config))


def test_a_range_that_names_no_field_is_refused_where_the_class_is_made():
    import dataclasses

    from titan.config.configurable import Configurable

    with pytest.raises(TypeError, match="_ranges names no field dimm"):

        class Broken(Configurable):
            @dataclasses.dataclass(kw_only=True, slots=True)
            class Config(Configurable.Config):
                dim: int = 1
                """Width."""

                _ranges = {"dimm": ranges.POSITIVE}
