"""Checkpoints of a pipelined run (torchrun, gloo): every stage's weights and optimizer state
are saved under the model's own names, so a run killed after its step-5 save resumes with the
same bits as a run never interrupted, and the same checkpoint continues on one process and on
another pipeline degree; resumed with another data-parallel degree, it is named a layout change
(with what to do), not damage."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.training_runs import FLOAT32, REPO, SEED, Launch, child_env, loss_bits, titan_trains

pytestmark = pytest.mark.slow  # every test here launches torchrun

ARGS = [
    "--config",
    "llama3_debugmodel",
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "4",
    *FLOAT32,
    *SEED,
    "--training.steps",
    "10",
    "--checkpoint.enable",
    "--checkpoint.interval",
    "5",
    "--checkpoint.keep_latest_k",
    "0",
]
PIPELINE = [
    "--parallelism.pipeline_parallel_degree",
    "2",
    "--parallelism.pipeline_parallel_schedule",
    "Interleaved1F1B",
]
LOSS_RTOL = 2e-4
"""Another layout adds the same fp32 numbers in another order; over 5 steps AdamW keeps the
losses within this (measured: 2e-5)."""


def _grad_norms(run) -> list[float]:
    return [m["grad_norm"] for m in run.metrics if "grad_norm" in m]


def test_a_killed_pipeline_resumes_bit_for_bit_and_loads_into_other_layouts(tmp_path):
    killed_dump = tmp_path / "killed"
    script = REPO / "tests" / "dist_scripts" / "die_after_save.py"
    killer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
            *ARGS,
            *PIPELINE,
            "--dump_folder",
            str(killed_dump),
        ],
        cwd=REPO,
        env=child_env(PYTHONPATH=str(REPO), TITAN_DIE_AFTER_STEP="5"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        (whole,) = titan_trains(
            [Launch([*ARGS, *PIPELINE], tmp_path / "whole", nproc=2)], timeout=600
        )
        _, killed_err = killer.communicate(timeout=600)
    finally:
        if killer.poll() is None:
            killer.kill()
            killer.wait()
    whole.check()
    assert killer.returncode != 0, killed_err[-3000:]
    assert "Signal 9 (SIGKILL)" in killed_err
    assert sorted(p.name for p in (killed_dump / "checkpoint").iterdir()) == ["step-5"]

    # The same checkpoint, continued by one process and by a pipeline over 3 ranks.
    for name in ("one", "pp3"):
        shutil.copytree(
            killed_dump / "checkpoint" / "step-5", tmp_path / name / "checkpoint" / "step-5"
        )
    resumed, one, pp3 = titan_trains(
        [
            Launch([*ARGS, *PIPELINE], killed_dump, nproc=2),
            Launch(ARGS, tmp_path / "one"),
            Launch(
                [*ARGS, "--parallelism.pipeline_parallel_degree", "3"], tmp_path / "pp3", nproc=3
            ),
        ],
        timeout=600,
    )
    for run in (resumed, one, pp3):
        run.check()
        assert f"loaded checkpoint from {run.dump_folder}/checkpoint/step-5" in run.stderr
    assert "world size 3 (PP 3)" in pp3.stderr
    after = [m for m in whole.metrics if m["step"] > 5]
    # The killed run's steps 1-5, then the resumed run's own, in the same metrics file.
    logged = [m for m in resumed.metrics if "loss" in m]
    assert [m["step"] for m in logged] == list(range(1, 11))
    assert loss_bits([m["loss"] for m in logged]) == loss_bits(whole.losses)
    assert loss_bits([m["grad_norm"] for m in logged]) == loss_bits(_grad_norms(whole))
    for run in (one, pp3):
        assert [m["step"] for m in run.metrics if "loss" in m] == [6, 7, 8, 9, 10]
        # Step 6 runs on the saved weights: only the order of fp32 sums differs.
        assert run.losses[0] == pytest.approx(after[0]["loss"], rel=1e-6)
        assert run.losses == pytest.approx([m["loss"] for m in after], rel=LOSS_RTOL)
        assert [m["lr"] for m in run.metrics if "lr" in m] == [m["lr"] for m in after]


LAYOUT = [
    "--config",
    "llama3_debugmodel",
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "4",
    *FLOAT32,
    *SEED,
    "--checkpoint.enable",
    "--checkpoint.interval",
    "1",
    "--checkpoint.keep_latest_k",
    "0",
]
FSDP2 = ["--parallelism.data_parallel_shard_degree", "2"]


def _files(folder) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_a_data_parallel_layout_change_is_named_not_called_damage(tmp_path):
    """PP 2 (one data-parallel rank) resumed as FSDP 2, and FSDP 2 resumed on one process: the
    run says what changed and what to do, never that the checkpoints are damaged; without the
    data position the same checkpoint resumes."""
    pp, fsdp = titan_trains(
        [
            Launch([*LAYOUT, "--training.steps", "2", *PIPELINE], tmp_path / "pp", nproc=2),
            Launch([*LAYOUT, "--training.steps", "2", *FSDP2], tmp_path / "fsdp", nproc=2),
        ],
        timeout=600,
    )
    pp.check()
    fsdp.check()
    for name, source in (("pp_as_fsdp", "pp"), ("pp_fresh_data", "pp"), ("fsdp_as_one", "fsdp")):
        shutil.copytree(tmp_path / source / "checkpoint", tmp_path / name / "checkpoint")
    before = {
        name: _files(tmp_path / name / "checkpoint") for name in ("pp_as_fsdp", "fsdp_as_one")
    }
    resume = [*LAYOUT, "--training.steps", "4"]
    pp_as_fsdp, pp_fresh_data, fsdp_as_one = titan_trains(
        [
            Launch([*resume, *FSDP2], tmp_path / "pp_as_fsdp", nproc=2),
            Launch(
                [*resume, *FSDP2, "--checkpoint.exclude_from_loading", "dataloader"],
                tmp_path / "pp_fresh_data",
                nproc=2,
            ),
            Launch(resume, tmp_path / "fsdp_as_one"),
        ],
        timeout=600,
    )
    saved = [
        (
            pp_as_fsdp,
            "saved by 2 processes with 1 data-parallel rank (dp_rank_0), and this run has 2 "
            "data-parallel ranks on 2 processes",
        ),
        (
            fsdp_as_one,
            "saved by 2 processes with 2 data-parallel ranks (dp_rank_0, dp_rank_1), and this "
            "run has 1 data-parallel rank on 1 process",
        ),
    ]
    for run, what in saved:
        assert run.returncode != 0, run.stderr[-3000:]
        step = run.dump_folder / "checkpoint" / "step-2"
        assert f"error: {step} was {what}" in run.stderr, run.stderr[-3000:]
        assert "only the data-parallel layout changed" in run.stderr
        assert "--checkpoint.exclude_from_loading dataloader" in run.stderr
        assert "damaged" not in run.stderr and not re.search(r"\bmove\b", run.stderr)
        assert _files(run.dump_folder / "checkpoint") == before[run.dump_folder.name]
        assert run.losses == []  # nothing trained
    pp_fresh_data.check()
    step = tmp_path / "pp_fresh_data" / "checkpoint" / "step-2"
    assert f"loaded checkpoint from {step}" in pp_fresh_data.stderr
    assert [m["step"] for m in pp_fresh_data.metrics if "loss" in m] == [3, 4]
