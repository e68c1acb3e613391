"""Values older torchtitan eras ran with: carried as their era read them, or refused with what to
do, never dropped into a silently different run. Each input is in the shape of a real file of its
era (upstream's TOMLs, or a fork's of the same time)."""

from __future__ import annotations

from pathlib import Path

import pytest
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas import eras

from tests.helpers import validate, write


def findings(path: Path) -> dict[str, dict]:
    """titan-validate's findings on ``path`` by dotted key."""
    return {d["path"]: d for d in validate(path, "--format", "json").json()["diagnostics"]}


LLAMA = '[model]\nname = "llama3"\nflavor = "debugmodel"\n'

# --------------------------------------------------------------------------- refused values


@pytest.mark.parametrize("norm", ["layernorm", "np_layernorm", "LayerNorm"])
def test_a_layernorm_model_is_refused_with_what_to_do(tmp_path: Path, norm: str) -> None:
    # torchtitan/models/llama/train_configs/*.toml of 2024 carried `norm_type = "rmsnorm"`; a
    # fork that trained LayerNorm wrote another value there
    text = f'{LLAMA}norm_type = "{norm}"\n[training]\nsteps = 10\n'
    path = write(tmp_path, "job.toml", text)
    finding = findings(path)["model.norm_type"]
    assert finding["severity"] == "error"
    assert "LayerNorm" in finding["message"] and "RMSNorm" in finding["message"]
    assert "keep this run on a torchtitan before 5078e92e" in finding["hint"]
    assert "drops it" not in finding["hint"]
    plan = build_plan(path)
    assert [d.path for d in plan.errors() if d.code != "era-default-lost"] == ["model.norm_type"]
    assert plan.outcomes["model.norm_type"].status == "rejected"
    upgraded, (step,) = eras.upgrade({"model": {"norm_type": norm}})
    assert (step.kind, step.severity) == ("unportable", "error")
    assert upgraded == {} and eras.refusals({"model": {"norm_type": norm}}) == [step]


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("mixed_precision_reduce", "bfloat16", 'set "float32"'),
        ("mixed_precision_reduce", "float16", 'set "float32"'),
        ("mixed_precision_param", "float16", 'set "bfloat16"'),
    ],
)
def test_a_dtype_the_loader_let_through_is_refused_truthfully(
    tmp_path: Path, key: str, value: str, allowed: str
) -> None:
    path = write(tmp_path, "job.toml", f'{LLAMA}[training]\n{key} = "{value}"\n')
    finding = findings(path)[f"training.{key}"]
    assert finding["code"] == "invalid-choice" and finding["severity"] == "error"
    assert allowed in finding["hint"] and "keep this run on torchtitan" in finding["hint"]
    assert "did you mean" not in finding["hint"]  # not a typo: the run used that dtype
    assert "5c69c02e" in finding["hint"]


# --------------------------------------------------------------------------- comma-separated lists


def test_a_comma_separated_list_is_read_as_its_era_split_it(tmp_path: Path) -> None:
    # torchtitan/config_manager.py (2025-02 to 2025-04) split string_list options from TOML
    text = (
        f'{LLAMA}converters = "quantize.linear.float8, quantize.grouped_mm.float8"\n'
        '[checkpoint]\nenable = true\nexclude_from_loading = "optimizer,lr_scheduler,"\n'
    )
    path = write(tmp_path, "job.toml", text)
    found = findings(path)
    hint = found["checkpoint.exclude_from_loading"]["hint"]
    assert 'reads it as `exclude_from_loading = ["optimizer", "lr_scheduler"]`' in hint
    assert "#819" in hint
    assert "#823" in found["model.converters"]["hint"]
    plan = build_plan(path)
    assert plan.errors() == []
    config = instantiate(plan)
    assert config.checkpoint.exclude_from_loading == ["optimizer", "lr_scheduler"]
    assert plan.outcomes["model.converters"].status == "upgraded"
    assert len(config.model_converters.converters) == 2


def test_an_old_float8_filter_string_is_split_where_it_moves(tmp_path: Path) -> None:
    text = f'{LLAMA}converters = ["float8"]\n[float8]\nfilter_fqns = "output, layers.0.attention"\n'
    step = eras.translate(("float8", "filter_fqns"), "output, layers.0.attention")
    assert dict(step.writes)[("quantize", "linear", "float8", "filter_fqns")] == [
        "output",
        "layers.0.attention",
    ]
    path = write(tmp_path, "job.toml", text)
    assert '["output", "layers.0.attention"]' in findings(path)["float8.filter_fqns"]["hint"]


def test_one_name_is_not_an_era_question(tmp_path: Path) -> None:
    assert eras.value_step(("model", "converters"), "float8") is None
    assert eras.value_step(("model", "converters"), ["a,b"]) is None  # a list stays as written


# --------------------------------------------------------------------------- dataset names


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("c4_mini", "the first 2,000 of c4_mini's 45,000 documents"),
        ("alpaca", 'dataset_path = "tatsu-lab/alpaca"'),
        ("openwebtext", "bfe99987"),
        ("c4_tset", 'did you mean "c4_test"?'),
        ("my_corpus", '[tool.titan] datasets = ["my_corpus"]'),
    ],
)
def test_a_dataset_v022_did_not_register_fails_the_check(
    tmp_path: Path, name: str, said: str
) -> None:
    path = write(tmp_path, "job.toml", f'{LLAMA}[training]\ndataset = "{name}"\n')
    finding = findings(path)["training.dataset"]
    assert finding["severity"] == "error" and "not registered" in finding["message"]
    assert said in finding["hint"]
    assert "training.dataset" in {d.path for d in build_plan(path).errors()}


def test_registered_names_pass_as_v022_looked_them_up(tmp_path: Path) -> None:
    for name in ("c4", "c4_test", "C4_Test"):  # v0.2.2's text loader lowercases the name
        path = write(tmp_path, "job.toml", f'{LLAMA}[training]\ndataset = "{name}"\n')
        assert "training.dataset" not in findings(path), name


def test_flux_reads_its_own_registry(tmp_path: Path) -> None:
    flux = '[model]\nname = "flux"\nflavor = "flux-debug"\n[training]\ndataset = "{}"\n'
    path = write(tmp_path, "job.toml", flux.format("cc12m"))  # the name of 2025-04-04
    assert 'set dataset = "cc12m-wds"' in findings(path)["training.dataset"]["hint"]
    path = write(tmp_path, "job.toml", flux.format("cc12m-wds"))
    assert "training.dataset" not in findings(path)


def test_the_validation_dataset_is_checked_when_validation_runs(tmp_path: Path) -> None:
    text = f'{LLAMA}[validation]\ndataset = "c4_mini"\n'
    assert "validation.dataset" not in findings(write(tmp_path, "off.toml", text))
    on = text.replace("[validation]\n", "[validation]\nenable = true\n")
    assert "c4_test" in findings(write(tmp_path, "on.toml", on))["validation.dataset"]["hint"]


def test_a_fork_declares_its_datasets(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path, "pyproject.toml", '[tool.titan]\ndatasets = ["my_corpus"]\n')
    path = write(tmp_path, "job.toml", f'{LLAMA}[training]\ndataset = "my_corpus"\n')
    assert validate(path).code == 0
    write(tmp_path, "pyproject.toml", "[tool.titan]\ndatasets = 3\n")
    found = findings(path)
    assert "datasets must be a list of names" in found["tool.titan.datasets"]["message"]


def test_a_custom_import_may_register_the_name(tmp_path: Path) -> None:
    text = (
        f'{LLAMA}[training]\ndataset = "my_corpus"\n[experimental]\ncustom_import = "fork.data"\n'
    )
    finding = findings(write(tmp_path, "job.toml", text))["training.dataset"]
    assert finding["severity"] == "warning" and "unless `fork.data`" in finding["message"]


def test_the_registry_form_runs_the_same_rule(tmp_path: Path) -> None:
    registry = write(
        tmp_path,
        "config_registry.py",
        "from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader\n"
        "from titan.models.llama3 import model_registry\n"
        "from titan.trainer import Trainer\n\n\n"
        "def llama3_debug() -> Trainer.Config:\n"
        "    return Trainer.Config(\n"
        '        model_spec=model_registry("debugmodel"),\n'
        '        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4_mini"),\n'
        "    )\n",
    )
    result = validate(registry, "--format", "json")
    (finding,) = [d for d in result.json()["diagnostics"] if "dataset" in d["message"]]
    assert finding["line"] == 9 and "34fa017b" in finding["hint"]


# --------------------------------------------------------------------------- modules and forks


def test_a_fork_module_named_by_custom_args_module_keeps_its_keys(tmp_path: Path) -> None:
    # 2025-04 to 2025-10 the loader merged this module's dataclasses; a fork that declared its
    # own [training] expert_parallel_degree read it there
    write(
        tmp_path,
        "fork_ext.py",
        "from dataclasses import dataclass, field\n\n\n@dataclass\nclass Training:\n"
        "    expert_parallel_degree: int = 1\n\n\n@dataclass\nclass JobConfig:\n"
        "    training: Training = field(default_factory=Training)\n",
    )
    text = (
        f'[experimental]\ncustom_args_module = "fork_ext"\n{LLAMA}'
        "[training]\nexpert_parallel_degree = 2\n"
    )
    path = write(tmp_path, "job.toml", text)
    found = findings(path)
    assert "training.expert_parallel_degree" not in found
    assert (
        'now `job.custom_config_module = "fork_ext"`'
        in found["experimental.custom_args_module"]["hint"]
    )
    plan = build_plan(path)
    assert plan.outcomes["training.expert_parallel_degree"].status == "carried"
    assert instantiate(plan).training.expert_parallel_degree == 2


def test_an_upstream_files_ignored_key_is_said_to_be_one(tmp_path: Path) -> None:
    # train_configs/debug_model_2d.toml, ab5d9182 (2024-03-27)
    text = f"{LLAMA}[metrics]\nlog_freq = 1\nuse_for_integration_test = true\n"
    hint = findings(write(tmp_path, "job.toml", text))["metrics.use_for_integration_test"]["hint"]
    assert "an upstream file's key" in hint and "safe to delete" in hint
    assert "fork" not in hint


@pytest.mark.parametrize(
    "path",
    [
        "./torchtitan/datasets/tokenizer/tokenizer.model",  # the 2024 default, written out
        "./test/assets/test_tiktoken.model",  # upstream's debug_model.toml of 2024-05
        "/data/llama/original/tokenizer.model",
    ],
)
def test_a_tokenizer_model_file_is_refused_with_the_key_to_write(tmp_path: Path, path: str) -> None:
    text = f'{LLAMA}tokenizer_path = "{path}"\n[training]\nsteps = 10\n'
    job = write(tmp_path, "job.toml", text)
    finding = findings(job)["model.tokenizer_path"]
    assert finding["severity"] == "error"
    assert "Hugging Face tokenizer folder" in finding["message"]
    assert "`model.hf_assets_path`" in finding["hint"]
    plan = build_plan(job)
    assert plan.outcomes["model.tokenizer_path"].status == "rejected"
    assert not plan.lossless()
    # a folder (what v0.2.2 copied into hf_assets_path) is carried
    folder = write(tmp_path, "ok.toml", text.replace(path, "./tests/assets/tokenizer"))
    assert build_plan(folder).outcomes["model.tokenizer_path"].status == "carried"


def test_the_text_datasets_a_legacy_toml_may_name_are_the_ones_titan_train_loads() -> None:
    from titan.schemas import dataset_names

    from titan.hf_datasets.text_datasets import DATASETS

    assert set(dataset_names.v022_registry("llama3")[0]) == set(DATASETS)
    assert set(dataset_names.TEXT) <= set(DATASETS)  # v0.2.2's names all still load
