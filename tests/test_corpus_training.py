"""Every upstream torchtitan v0.2.2 TOML of the families titan-train trains (llama3, qwen3,
llama4, deepseek_v3, gpt_oss), as a user would hand it over.

1. ``titan-train --preflight`` at the GPU count the file was written for passes, or refuses the
   layout with the message a run would print (context parallel: not in titan-train yet; every
   other refusal says in ``EXPECTED`` what it waits for).
2. (slow) The same file, shrunk to two CPU processes (four where pipeline and tensor parallel
   meet) by one rule (``shrunk``), trains two steps
   under torchrun with gloo and logs two finite losses, or is refused as in 1.

The corpus is read from ``../shared/corpus`` (``tests.reference``): without it these tests skip,
and under CI (where it is promised) they fail.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import pytest
import tomli_w

from tests.reference import CORPUS, require
from tests.training_runs import REPO, titan_train
from titan.models import SUPPORTED_MODELS, family_record
from titan.train import main

MODELS = CORPUS / "torchtitan" / "models"
FAMILIES = tuple(
    family
    for family in SUPPORTED_MODELS
    if family_record(family).capabilities.training_refusal is None and family != "flux"
)
"""The language-model families titan-train trains. Flux's files need its image and test-mode
encoder settings to run on a CPU: ``tests/test_flux_train.py`` runs every one of them."""
TOKENIZER = REPO / "tests" / "assets" / "tokenizer"

PIPELINE_BATCH = (
    "schedule '1F1B' needs at least as many microbatches as stages (4), but "
    "training.local_batch_size (1) / pipeline_parallel_microbatch_size (1) gives 1"
)


@dataclasses.dataclass(frozen=True)
class Expected:
    """What titan-train says of one corpus file."""

    gpus: int
    """The GPU count the file is checked at. torchtitan's TOMLs are written for its default
    launch of 8 GPUs; a file whose degrees need more gets the smallest count >= 8 they fit."""
    passed: str | None = None
    """The pre-flight summary after ``pre-flight passed: `` (None when the file is refused)."""
    refused: tuple[str, ...] = ()
    """Texts of the refusal a run prints, both at ``gpus`` and shrunk to two processes."""
    waits_for: str | None = None
    """For a refusal that is not pipeline/context parallel: the feature it waits for."""


# Keys: paths under torchtitan/models/ in the corpus.
EXPECTED: dict[str, Expected] = {
    "llama3/train_configs/debug_model.toml": Expected(
        gpus=8, passed="llama3 debugmodel, 8 GPUs (FSDP 8), 6.2M parameters"
    ),
    "llama3/train_configs/llama3_8b.toml": Expected(
        gpus=8, passed="llama3 8B, 8 GPUs (FSDP 8), 8.0B parameters"
    ),
    "llama3/train_configs/llama3_70b.toml": Expected(
        gpus=8, passed="llama3 70B, 8 GPUs (TP 8), 70.6B parameters"
    ),
    "llama3/train_configs/llama3_405b.toml": Expected(
        gpus=8,
        refused=('error[unknown-converter] converter `"float8"` is not registered',),
        waits_for=(
            "nothing in titan: the file names its converter by the name torchtitan dropped "
            "before v0.2.2, which fails there too (titan-validate --fix renames it)"
        ),
    ),
    "qwen3/train_configs/qwen3_0.6b.toml": Expected(
        gpus=8, passed="qwen3 0.6B, 8 GPUs (FSDP 8), 596.0M parameters"
    ),
    "qwen3/train_configs/qwen3_1.7b.toml": Expected(
        gpus=8, passed="qwen3 1.7B, 8 GPUs (FSDP 8), 1.7B parameters"
    ),
    "qwen3/train_configs/qwen3_32b.toml": Expected(
        gpus=8, passed="qwen3 32B, 8 GPUs (FSDP 8), 32.8B parameters"
    ),
    "qwen3/train_configs/qwen3_moe_debug.toml": Expected(
        gpus=8, passed="qwen3 debugmodel_moe, 8 GPUs (FSDP 8), 315.8M parameters"
    ),
    "llama4/train_configs/debug_model.toml": Expected(
        gpus=8, passed="llama4 debugmodel, 8 GPUs (FSDP 8), 15.0M parameters"
    ),
    # expert_tensor_parallel_degree = 8 without expert parallel: no expert shards to split (as in
    # torchtitan, which reads it only with EP); the MoE layers run under TP 8 like the rest.
    "llama4/train_configs/llama4_17bx16e.toml": Expected(
        gpus=8, passed="llama4 17bx16e, 8 GPUs (TP 8), 107.8B parameters"
    ),
    # Pipeline 4 x tensor parallel 8: 32 GPUs. Its local batch of 1 is one microbatch, and
    # torch's 1F1B needs one per stage (torchtitan v0.2.2 stops on torch's error at its first step).
    "llama4/train_configs/llama4_17bx128e.toml": Expected(
        gpus=32,
        refused=(PIPELINE_BATCH,),
        waits_for="a local batch of at least 4 in the file",
    ),
    "deepseek_v3/train_configs/debug_model.toml": Expected(
        gpus=8, passed="deepseek_v3 debugmodel, 8 GPUs (FSDP 8), 33.0M parameters"
    ),
    "deepseek_v3/train_configs/deepseek_v3_16b.toml": Expected(
        gpus=8, passed="deepseek_v3 16B, 8 GPUs (FSDP 8, EP 8), 15.7B parameters"
    ),
    "deepseek_v3/train_configs/deepseek_v3_671b.toml": Expected(
        gpus=8, passed="deepseek_v3 671B, 8 GPUs (FSDP 8), 671.0B parameters"
    ),
    "gpt_oss/train_configs/debug_model.toml": Expected(
        gpus=8, passed="gpt_oss debugmodel, 8 GPUs (FSDP 8), 183.4M parameters"
    ),
}

# Files refused at full size that train once shrunk: the converter under its stale name is
# dropped with the rest; the shrunk local batch of 2 feeds 1F1B's 2 stages.
SHRUNK_PASSES = {
    "llama3/train_configs/llama3_405b.toml",
    "llama4/train_configs/llama4_17bx128e.toml",
}

# Processes of a shrunk file whose degrees of 2 multiply past 2 (pipeline 2 x tensor parallel 2).
SHRUNK_NPROC = {"llama4/train_configs/llama4_17bx128e.toml": 4}

# Each family's debug flavor, dense and with experts (qwen3 has both).
DEBUG_FLAVOR = {"qwen3": {"dense": "debugmodel", "moe": "debugmodel_moe"}}

DEGREES = (
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
    "expert_tensor_parallel_degree",
)


def corpus_path(name: str) -> Path:
    """The corpus file ``name`` (skips without the corpus, fails under CI)."""
    require(MODELS)
    return MODELS / name


def test_the_table_names_every_corpus_file_of_the_families():
    require(MODELS)
    found = {
        str(path.relative_to(MODELS))
        for family in FAMILIES
        for path in (MODELS / family).rglob("*.toml")
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preflight_at_the_files_gpu_count(name, capsys, tmp_path, monkeypatch):
    expected = EXPECTED[name]
    monkeypatch.chdir(tmp_path)  # the files' relative dump folders land here, if anywhere
    # Pre-flight reads the tokenizer and locates the dataset where it runs, as the run does:
    # the files' own (a cluster's Hugging Face folder, C4 on the Hub) are not on this machine.
    here = ["--model.hf_assets_path", str(REPO / "tests/assets/tokenizer")]
    here += ["--training.dataset", "c4_test"]
    code = main(
        [
            "--preflight",
            "--ngpu",
            str(expected.gpus),
            "--job.config_file",
            str(corpus_path(name)),
            *here,
        ]
    )
    out, err = capsys.readouterr()
    if expected.passed is not None:
        assert (code, out) == (0, f"pre-flight passed: {expected.passed}\n"), err
    else:
        assert (code, out) == (1, ""), err
        for text in expected.refused:
            assert text in err, f"{err}\n(once {expected.waits_for} lands, update EXPECTED)"
    assert list(tmp_path.iterdir()) == []


def shrunk(name: str, folder: Path) -> Path:
    """The corpus file ``name`` made to train two steps on two CPU processes, written in
    ``folder``. The rule:

    - the flavor becomes the family's debug flavor (``debugmodel``; qwen3's MoE file keeps
      ``debugmodel_moe``), with the test tokenizer and the bundled ``c4_test`` set;
    - every parallel degree > 1 becomes 2, the others keep 1 or -1 (the ranks left over);
    - sequence 64, local batch 2 (global batch unset), 2 steps, 1 warm-up step, a loss every step,
      float32 mixed precision (a CPU without bfloat16 instructions emulates it, many times slower);
    - no checkpoint, no compile (so no async tensor parallel, which needs it), no validation, no
      TensorBoard/W&B, and no model converters (the corpus names only float8, which these files
      do not need to train).
    """
    with corpus_path(name).open("rb") as handle:
        document = tomllib.load(handle)
    family = document["model"]["name"]
    kind = "moe" if "moe" in document["model"]["flavor"] else "dense"
    model = document["model"]
    model["flavor"] = DEBUG_FLAVOR.get(family, {}).get(kind, "debugmodel")
    model["hf_assets_path"] = str(TOKENIZER)
    model.pop("converters", None)
    parallelism = document.setdefault("parallelism", {})
    for key in DEGREES:
        if parallelism.get(key, 1) > 1:
            parallelism[key] = 2
    if "enable_async_tensor_parallel" in parallelism:
        parallelism["enable_async_tensor_parallel"] = False
    training = document.setdefault("training", {})
    training.update(seq_len=64, local_batch_size=2, steps=2, dataset="c4_test")
    training["mixed_precision_param"] = "float32"
    training.pop("dataset_path", None)
    training.pop("global_batch_size", None)
    document.setdefault("lr_scheduler", {})["warmup_steps"] = 1
    document.setdefault("metrics", {}).update(
        log_freq=1, enable_tensorboard=False, enable_wandb=False
    )
    for section in ("checkpoint", "compile", "validation"):
        document.setdefault(section, {})["enable"] = False
    path = folder / Path(name).name
    path.write_text(tomli_w.dumps(document), encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_file_shrunk_to_two_processes_trains_two_steps(name, tmp_path):
    expected = EXPECTED[name]
    run = titan_train(
        ["--job.config_file", str(shrunk(name, tmp_path))],
        dump_folder=tmp_path / "run",
        legacy=True,
        nproc=SHRUNK_NPROC.get(name, 2),
    )
    if expected.passed is None and name not in SHRUNK_PASSES:
        assert run.returncode == 1, run.stderr[-4000:]
        for text in expected.refused:
            assert text in run.stderr, (
                f"{run.stderr}\n(once {expected.waits_for} lands, update EXPECTED)"
            )
        return
    run.check()
    assert len(run.losses) == 2 and all(map(math.isfinite, run.losses)), run.metrics
