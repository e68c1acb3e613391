"""Checkpoints of a pipelined run (torchrun, gloo): every stage's weights and optimizer state
are saved under the model's own names, so a run killed after its step-5 save resumes with the
same bits as a run never interrupted, and the same checkpoint continues on one process and on
another pipeline degree."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.training_runs import REPO, SEED, Launch, child_env, loss_bits, titan_trains

pytestmark = pytest.mark.slow  # every test here launches torchrun

ARGS = [
    "--config",
    "llama3_debugmodel",
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "4",
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
