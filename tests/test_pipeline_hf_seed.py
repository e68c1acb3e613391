"""Pipelined runs (torchrun, gloo) with what used to be refused under pipeline parallel: a seed
checkpoint made from a pipelined config, Hugging Face exports and imports, and per-document
(block_causal) attention masks, each against the same run in one process."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.training_runs import FLOAT32, REPO, SEED, Launch, titan_trains

pytestmark = pytest.mark.slow  # every test here launches torchrun

DEBUG_TOML = str(REPO / "legacy_configs" / "llama3" / "debug_model.toml")
BATCH = ["--training.seq_len", "64", "--training.local_batch_size", "4", *FLOAT32, *SEED]
INTERLEAVED = [
    "--parallelism.pipeline_parallel_degree",
    "2",
    "--parallelism.pipeline_parallel_schedule",
    "Interleaved1F1B",
]
# A zero learning rate keeps the weights of step 1 those of the seed (AdamW moves nothing),
# so the export of step 1 is the seed's weights in Hugging Face's names.
EXPORT = [
    "--training.steps",
    "1",
    "--optimizer.lr",
    "0",
    "--checkpoint.enable",
    "--checkpoint.last_save_model_only",
    "--checkpoint.last_save_in_hf",
]
FIRST_LOSS_RTOL = 1e-6
"""The pipeline sums its microbatches' losses, one process takes one mean: the same fp32
numbers added in another order (measured: equal to the last bit on these batches)."""


def _exported(run) -> dict[str, torch.Tensor]:
    return load_file(str(run.dump_folder / "checkpoint" / "step-1" / "model.safetensors"))


def _seeded(folder, seed_step0) -> None:
    """Put the seed checkpoint in ``folder``'s checkpoint folder, as its step 0."""
    import shutil

    shutil.copytree(seed_step0, folder / "checkpoint" / "step-0")


def _dcp(path) -> dict[str, torch.Tensor]:
    """Every tensor of the DCP checkpoint in ``path``."""
    import torch.distributed.checkpoint as dcp

    metadata = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    state = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in metadata.items()}
    dcp.load(state, checkpoint_id=str(path), no_dist=True)
    return state


def test_a_pipelined_config_makes_the_seed_its_pipeline_exports_and_imports_in_hf(tmp_path):
    # A seed from the registry form and one from the TOML form, both pipelined (the TOML one
    # over FSDP too): one process each, on one process's layout.
    registry_seed, toml_seed = titan_trains(
        [
            Launch(
                ["--config", "llama3_debugmodel", *BATCH, *INTERLEAVED]
                + ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint"],
                tmp_path / "seed",
            ),
            Launch(
                ["--job.config_file", DEBUG_TOML, *BATCH, *INTERLEAVED]
                + ["--parallelism.data_parallel_shard_degree", "2"]
                + ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint"],
                tmp_path / "toml_seed",
                legacy=True,
            ),
        ]
    )
    for run in (registry_seed, toml_seed):
        run.check()
        assert "seed checkpoint written" in run.stderr
        assert "parallelism.pipeline_parallel_degree = 2 -> 1" in run.stderr
    assert "parallelism.data_parallel_shard_degree = 2 -> 1" in toml_seed.stderr
    step0 = tmp_path / "seed" / "checkpoint" / "step-0"
    seed = _dcp(step0)
    other = _dcp(tmp_path / "toml_seed" / "checkpoint" / "step-0")
    assert sorted(seed) == sorted(other) and all(torch.equal(seed[k], other[k]) for k in seed)

    # The same seed trained one step at lr 0 and exported: in one process, and pipelined.
    for name in ("one", "pp"):
        _seeded(tmp_path / name, step0)
    one, pp = titan_trains(
        [
            Launch(["--config", "llama3_debugmodel", *BATCH, *EXPORT], tmp_path / "one"),
            Launch(
                ["--config", "llama3_debugmodel", *BATCH, *EXPORT, *INTERLEAVED],
                tmp_path / "pp",
                nproc=2,
            ),
        ]
    )
    for run in (one, pp):
        run.check()
        assert re.search(r"loaded seed checkpoint \(model only\) from .*step-0", run.stderr)
        assert "checkpoint of step 1 (model only, Hugging Face safetensors in float32)" in (
            run.stderr
        )
    assert "world size 2 (PP 2)" in pp.stderr
    assert pp.losses[0] == pytest.approx(one.losses[0], rel=FIRST_LOSS_RTOL)
    # Every stage's tensors are in the pipelined export, each the one-process export's bits.
    mine, theirs = _exported(pp), _exported(one)
    assert len(mine) == 57 and sorted(mine) == sorted(theirs)
    for key in theirs:
        assert torch.equal(mine[key], theirs[key]), key
    step1 = tmp_path / "one" / "checkpoint" / "step-1"
    assert (step1 / "model.safetensors").read_bytes() == (
        tmp_path / "pp" / "checkpoint" / "step-1" / "model.safetensors"
    ).read_bytes()

    # A pipeline of another schedule starts from that export: the seed's first loss again.
    # The same export without the final norm's weight, which only the last stage reads: both
    # ranks stop with that stage's finding, none hangs.
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    save_file(
        {key: value for key, value in theirs.items() if key != "model.norm.weight"},
        str(damaged / "model.safetensors"),
    )
    from_hf, from_damaged = titan_trains(
        [
            Launch(
                ["--config", "llama3_debugmodel", *BATCH, "--training.steps", "1"]
                + ["--parallelism.pipeline_parallel_degree", "2", "--checkpoint.enable"]
                + ["--checkpoint.initial_load_in_hf"]
                + ["--checkpoint.initial_load_path", str(folder)],
                tmp_path / name,
                nproc=2,
            )
            for folder, name in ((step1, "from_hf"), (damaged, "from_damaged"))
        ]
    )
    from_hf.check()
    assert f"from {step1}" in from_hf.stderr
    assert from_hf.losses[0] == pytest.approx(one.losses[0], rel=FIRST_LOSS_RTOL)
    assert from_damaged.returncode != 0 and from_damaged.metrics == []
    for rank in (0, 1):
        assert (
            f"titan-train rank {rank}: error: {damaged} does not hold this model: 1 of its 29 "
            "tensors are missing, e.g. ['norm.weight']"
        ) in from_damaged.stderr
    assert "the pipeline stages that read them hold 29 of the model's 57 tensors" in (
        from_damaged.stderr
    )
    # torchrun prints its own traceback for the failed workers; none comes from titan's own
    # source (the checkout's packages, wherever it is and whatever its folder is named)
    own = "|".join(re.escape(str(REPO / package)) for package in ("titan", "schemas", "migrate"))
    assert re.search(rf'File "(?:{own})/', from_damaged.stderr) is None


# 4 rows of 256 tokens: the first batch already packs several documents, so its first loss,
# computed on the same weights by every run, shows the masks.
BLOCK_CAUSAL = ["--job.config_file", DEBUG_TOML, *FLOAT32, *SEED, "--training.steps", "1"]
BLOCK_CAUSAL += ["--training.seq_len", "256", "--training.local_batch_size", "4"]
VALIDATION = ["--validation.enable", "--validation.freq", "1", "--validation.steps", "1"]
VALIDATION += ["--validation.dataset", "c4_test_validation", "--validation.seq_len", "256"]
VALIDATION += ["--validation.local_batch_size", "4"]
GRAD_NORM_RTOL = 2e-4
"""The pipeline's gradient norm against one process's (measured: 3e-5; causal attention's is
5e-3 away)."""
VALIDATION_RTOL = 2e-5
"""Validation after the step: AdamW's first update, of the pipeline's gradients, moves the
weights a little differently (measured: 2e-6)."""


def test_a_pipeline_runs_block_causal_masks_as_one_process(tmp_path):
    flex = ["--model.flavor", "debugmodel_flex_attn"]
    one, pp, causal = titan_trains(
        [
            Launch([*BLOCK_CAUSAL, *flex, *VALIDATION], tmp_path / "one", legacy=True),
            Launch(
                [*BLOCK_CAUSAL, *flex, *VALIDATION, *INTERLEAVED],
                tmp_path / "pp",
                legacy=True,
                nproc=2,
            ),
            Launch(BLOCK_CAUSAL, tmp_path / "causal", legacy=True),
        ]
    )
    for run in (one, pp, causal):
        run.check()
    assert "llama3 debugmodel_flex_attn" in pp.stderr and "world size 2 (PP 2)" in pp.stderr
    assert pp.losses[0] == pytest.approx(one.losses[0], rel=FIRST_LOSS_RTOL)
    norms = [[m["grad_norm"] for m in r.metrics if "grad_norm" in m] for r in (one, pp, causal)]
    assert norms[1] == pytest.approx(norms[0], rel=GRAD_NORM_RTOL)
    validated = [
        [m["validation_loss"] for m in r.metrics if "validation_loss" in m] for r in (one, pp)
    ]
    assert len(validated[0]) == 1
    assert validated[1] == pytest.approx(validated[0], rel=VALIDATION_RTOL)
    # The masks matter on this batch: causal attention gives another first loss and gradient.
    assert causal.losses[0] != pytest.approx(one.losses[0], rel=10 * FIRST_LOSS_RTOL)
    assert norms[2] != pytest.approx(norms[0], rel=10 * GRAD_NORM_RTOL)
