"""``titan-train --preflight --ngpu N``: a run's checks for N processes, in both config forms, with
nothing started and nothing written.

The checks run in this process (through ``titan.train.main``, as the console script calls it),
so that the test can see that torch.distributed was never initialised; one case is a real
process, for the exit code and streams a user sees.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch.distributed

from tests.training_runs import DEBUG_TOML, run_train
from titan.train import main

TOML = str(DEBUG_TOML)
FORMS = {
    "legacy": ["--job.config_file", TOML],
    "registry": ["--config", "llama3_debugmodel"],
}
DUMP_FLAG = {"legacy": "--job.dump_folder", "registry": "--dump_folder"}
SAVE_CONFIG_FLAG = {"legacy": "--job.save_config_file", "registry": "--debug.save_config_file"}


def preflight(capsys, *args: str) -> tuple[int, str, str]:
    """``titan-train --preflight ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(["--preflight", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch) -> Path:
    """An empty working folder, so that anything written relative to it is seen."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.parametrize("form", FORMS)
def test_a_layout_that_runs_passes_in_one_line_and_writes_nothing(capsys, empty_cwd, form):
    dump = empty_cwd.parent / "run"
    code, out, err = preflight(
        capsys,
        "--ngpu",
        "4",
        *FORMS[form],
        DUMP_FLAG[form],
        str(dump),
        SAVE_CONFIG_FLAG[form],
        "config.json",
    )
    assert code == 0, err
    assert out == "pre-flight passed: llama3 debugmodel, 4 GPUs (FSDP 4), 6.2M parameters\n"
    assert "error" not in err
    assert not dump.exists()  # no dump folder, no lock, no saved config
    assert list(empty_cwd.iterdir()) == []
    assert not torch.distributed.is_initialized()


def test_the_world_size_defaults_to_world_size_then_one(capsys, empty_cwd, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, out, _ = preflight(
        capsys, *FORMS["registry"], "--parallelism.tensor_parallel_degree", "2"
    )
    assert (code, out) == (
        0,
        "pre-flight passed: llama3 debugmodel, 2 GPUs (TP 2), 6.2M parameters\n",
    )
    monkeypatch.delenv("WORLD_SIZE")
    code, out, _ = preflight(capsys, *FORMS["legacy"])
    assert (code, out) == (
        0,
        "pre-flight passed: llama3 debugmodel, 1 GPU (one process), 6.2M parameters\n",
    )
    assert not torch.distributed.is_initialized()


def test_an_expert_parallel_layout_is_summarised(capsys, empty_cwd):
    code, out, err = preflight(
        capsys,
        "--ngpu",
        "4",
        "--config",
        "llama4_debugmodel",
        "--parallelism.expert_parallel_degree",
        "4",
    )
    assert (code, out) == (
        0,
        "pre-flight passed: llama4 debugmodel, 4 GPUs (FSDP 4, EP 4), 15.0M parameters\n",
    ), err


# (id, arguments, texts stderr must hold): each is what a real run on that many processes says.
REFUSALS = [
    (
        "tp-not-dividing-heads",
        ["--ngpu", "3", *FORMS["registry"], "--parallelism.tensor_parallel_degree", "3"],
        ["error[tp-heads] tensor parallel degree 3 does not divide the 16 attention heads"],
    ),
    (
        "pipeline-parallel-v-schedule-with-validation",
        [
            "--ngpu",
            "2",
            *FORMS["legacy"],
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_schedule",
            "ZBVZeroBubble",
            "--validation.enable",
        ],
        [
            "error[pipeline-layout] validation does not run with schedule 'ZBVZeroBubble'",
            "choose another schedule",
        ],
    ),
    (
        "pipeline-parallel-with-too-few-microbatches",
        [
            "--ngpu",
            "2",
            *FORMS["registry"],
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_schedule",
            "DualPipeV",
            "--training.local_batch_size",
            "2",
        ],
        [
            "error[pipeline-layout] schedule 'DualPipeV' needs at least as many microbatches as stages (4)"
        ],
    ),
    (
        "degrees-not-the-world-size",
        ["--ngpu", "8", *FORMS["legacy"], "--parallelism.data_parallel_shard_degree", "2"],
        ["error[world-size]"],
    ),
    (
        "expert-parallel-layout-that-does-not-form",
        [
            "--ngpu",
            "4",
            "--config",
            "llama4_debugmodel",
            "--parallelism.expert_parallel_degree",
            "3",
        ],
        ["error[expert-parallel] expert parallel degree 3 must divide dp_shard × cp × tp = 4"],
    ),
    (
        "ddp-with-tensor-parallel",
        [
            "--ngpu",
            "4",
            *FORMS["registry"],
            "--parallelism.data_parallel_replicate_degree",
            "2",
            "--parallelism.data_parallel_shard_degree",
            "1",
            "--parallelism.tensor_parallel_degree",
            "2",
        ],
        [
            "error[ddp-layout] DDP (data_parallel_replicate_degree = 2 with "
            "data_parallel_shard_degree = 1) cannot be combined with tensor_parallel_degree = 2"
        ],
    ),
    (
        "feature-outside-the-capability-record",
        [
            "--job.config_file",
            str(DEBUG_TOML.parents[1] / "llama4" / "debug_model.toml"),
            "--model.converters",
            "quantize.linear.float8",
        ],
        [
            "titan-train: error: float8 training is not supported by titan-train yet for llama4; "
            "remove the float8 converter from model_converters.converters"
        ],
    ),
    (
        "encoder-that-is-not-local",
        ["--config", "flux_debugmodel"],
        ["titan-train: error: encoder.t5_encoder = 'google/t5-v1_1-xxl' is neither a local"],
    ),
]


@pytest.mark.parametrize(
    ("args", "wanted"), [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS]
)
def test_a_layout_a_run_would_refuse_fails_with_the_runs_message(capsys, empty_cwd, args, wanted):
    code, out, err = preflight(capsys, *args)
    assert code == 1, err
    assert out == ""
    for text in wanted:
        assert text in err, err
    assert "Traceback" not in err
    assert list(empty_cwd.iterdir()) == []
    assert not torch.distributed.is_initialized()


BROKEN_REGISTRY = """\
from titan.models.llama3.config_registry import llama3_debugmodel


def uneven_heads():
    config = llama3_debugmodel()
    config.model_spec.model.dim = 100
    return config


def no_loss():
    config = llama3_debugmodel()
    config.model_spec.build_loss_fn = None
    return config
"""


@pytest.mark.parametrize(
    ("name", "wanted"),
    [
        ("uneven_heads", "titan-train: error: dim 100 is not divisible by n_heads 16"),
        ("no_loss", "titan-train: error: llama3 'debugmodel' has no build_loss_fn"),
    ],
    ids=["model-does-not-build", "no-loss-function"],
)
def test_what_the_run_would_build_is_built_on_the_meta_device(capsys, empty_cwd, name, wanted):
    registry = empty_cwd.parent / "config_registry.py"
    registry.write_text(BROKEN_REGISTRY, encoding="utf-8")
    code, _, err = preflight(capsys, "--registry", str(registry), "--config", name)
    assert code == 1
    assert wanted in err
    assert list(empty_cwd.iterdir()) == []


DOCUMENT_REGISTRY = """\
from titan.models.deepseek_v3 import model_registry as deepseek_v3_model
from titan.models.deepseek_v3.config_registry import deepseek_v3_debugmodel
from titan.models.llama3 import model_registry as llama3_model
from titan.models.llama3.config_registry import llama3_debugmodel


def llama3_documents():
    config = llama3_debugmodel()
    config.model_spec = llama3_model("debugmodel_flex_attn")
    return config


def deepseek_v3_documents_without_tokenizer():
    config = deepseek_v3_debugmodel()
    config.model_spec = deepseek_v3_model("debugmodel_flex_attn")
    config.tokenizer = None
    return config
"""
# The llama3 flavor whose attention masks by document, in each form.
DOCUMENTS = {
    "legacy": [*FORMS["legacy"], "--model.flavor", "debugmodel_flex_attn"],
    "registry": ["--registry", "{registry}", "--config", "llama3_documents"],
}
HF_ASSETS_FLAG = {"legacy": "--model.hf_assets_path", "registry": "--hf_assets_path"}


def documents_preflight(capsys, folder: Path, form: str, *args: str) -> tuple[int, str, str]:
    """Pre-flight of llama3's block-causal debug flavor in ``form``, with ``args`` after it."""
    registry = folder / "config_registry.py"
    registry.write_text(DOCUMENT_REGISTRY, encoding="utf-8")
    config = [arg.format(registry=registry) for arg in DOCUMENTS[form]]
    return preflight(capsys, *config, *args)


def tokenizer_without_eos(folder: Path) -> Path:
    """A three-word Hugging Face tokenizer with no end-of-text token, in ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.mark.parametrize("form", FORMS)
def test_block_causal_attention_needs_the_tokenizers_eos_token(capsys, empty_cwd, form):
    assets = tokenizer_without_eos(empty_cwd.parent / "no_eos")
    code, out, err = documents_preflight(
        capsys, empty_cwd.parent, form, HF_ASSETS_FLAG[form], str(assets)
    )
    assert (code, out) == (1, "")
    assert (
        "titan-train: error: block_causal attention ends each document at the EOS token, but "
        f"the tokenizer in {assets} has no eos_token"
    ) in err
    assert "Traceback" not in err
    assert list(empty_cwd.iterdir()) == []


@pytest.mark.parametrize("form", FORMS)
def test_block_causal_attention_passes_with_an_eos_token_and_a_missing_tokenizer_is_refused(
    capsys, empty_cwd, form
):
    summary = "pre-flight passed: llama3 debugmodel_flex_attn, 1 GPU (one process)"
    code, out, err = documents_preflight(capsys, empty_cwd.parent, form)
    assert code == 0, err
    assert out.startswith(summary)
    # A run reads its tokenizer before its first step, so one that is not here is refused.
    elsewhere = str(empty_cwd.parent / "only_on_the_cluster")
    code, out, err = documents_preflight(
        capsys, empty_cwd.parent, form, HF_ASSETS_FLAG[form], elsewhere
    )
    assert (code, out) == (1, "")
    assert f"titan-train: error: no tokenizer at {elsewhere!r}" in err


@pytest.mark.parametrize("form", FORMS)
def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(capsys, empty_cwd, form):
    from tokenizers import Tokenizer, models

    assets = empty_cwd.parent / "large"
    assets.mkdir()
    words = {f"w{i}": i for i in range(3000)}  # the debug model has 2,048 token ids
    Tokenizer(models.WordLevel(words, unk_token="w0")).save(str(assets / "tokenizer.json"))
    code, out, err = preflight(capsys, *FORMS[form], HF_ASSETS_FLAG[form], str(assets))
    assert (code, out) == (1, "")
    assert (
        f"titan-train: error: the tokenizer in {assets} has 3000 tokens but the model's "
        "vocab_size is 2048"
    ) in err


def test_block_causal_attention_without_a_tokenizer_needs_the_models_eos_id(capsys, empty_cwd):
    registry = empty_cwd.parent / "config_registry.py"
    registry.write_text(DOCUMENT_REGISTRY, encoding="utf-8")
    code, _, err = preflight(
        capsys, "--registry", str(registry), "--config", "deepseek_v3_documents_without_tokenizer"
    )
    assert code == 1
    assert "this config has no tokenizer and DeepSeekV3Model.Config no eos_id" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["--ngpu", "0", *FORMS["registry"]], "--ngpu must be at least 1, got 0"),
        (["--ngpu", "eight", *FORMS["legacy"]], "--ngpu must be a whole number of GPUs"),
        ([*FORMS["legacy"], "--ngpu"], "--ngpu requires a number of GPUs"),
        (["--ngpu", "2", "--ngpu=4", *FORMS["legacy"]], "--ngpu is given twice"),
        ([], "name a config"),
    ],
    ids=["zero", "not-a-number", "no-value", "twice", "no-config"],
)
def test_a_malformed_preflight_command_line_exits_2(capsys, empty_cwd, args, wanted):
    code, out, err = preflight(capsys, *args)
    assert (code, out) == (2, "")
    assert wanted in err


def test_ngpu_without_preflight_is_a_usage_error(capsys, empty_cwd):
    code = main(["--ngpu", "8", *FORMS["registry"]])
    assert code == 2
    assert "--ngpu is for --preflight" in capsys.readouterr().err
    assert list(empty_cwd.iterdir()) == []


def test_the_command_passes_and_refuses_with_its_exit_codes(tmp_path):
    def titan_train(*args: str) -> subprocess.CompletedProcess:
        return run_train(["--preflight", *args], cwd=tmp_path, timeout=300)

    passed = titan_train("--ngpu", "8", "--job.config_file", TOML)
    assert passed.returncode == 0, passed.stderr
    assert (
        passed.stdout == "pre-flight passed: llama3 debugmodel, 8 GPUs (FSDP 8), 6.2M parameters\n"
    )
    refused = titan_train(
        "--ngpu",
        "4",
        "--config",
        "gpt_oss_debugmodel",
        "--parallelism.tensor_parallel_degree",
        "2",
        "--parallelism.expert_parallel_degree",
        "2",
        "--parallelism.expert_tensor_parallel_degree",
        "2",
    )
    assert refused.returncode == 1
    assert "expert tensor parallel is not supported by titan-train yet" in refused.stderr
    assert list(tmp_path.iterdir()) == []
