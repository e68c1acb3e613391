"""Pipeline parallel under torchrun (gloo, CPU) against one process.

The trainer's own pipeline code (``tests/dist_scripts/pipeline_check.py``) is held to one
process's loss, grad norm and gradients at every step, for every schedule torch offers, a CSV
schedule in each of torch's two formats, PP x FSDP, PP x TP, HSDP x PP, PP x TP x FSDP and
PP x CP; ``titan-train`` itself trains and validates 10 steps as one process does; and the
TOML form and the generated registry give the same bits under a pipeline.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.training_runs import (
    FLOAT32,
    REPO,
    SEED,
    Launch,
    both_forms,
    loss_bits,
    titan_trains,
)

pytestmark = pytest.mark.slow  # every test here launches torchrun

LOSS_RTOL, NORM_RTOL = 2e-4, 2e-3
"""How far (relative) a 10-step run's losses and grad norms may drift from one process's."""
FIRST_RTOL = 3e-7
"""How far a first loss on the same weights may be from one process's: two float32 ulps."""

SHAPE = ["--training.seq_len", "64", "--training.steps", "10", *FLOAT32, *SEED]
PIPELINE = ["--parallelism.pipeline_parallel_degree", "2"]
VALIDATION = [
    "--validator.enable",
    "--validator.freq",
    "5",
    "--validator.steps",
    "2",
    "--validator.local_batch_size",  # the same rows for the accumulating run's batches of 1
    "4",
    "--validator.dataloader.dataset",
    "c4_test_validation",
]

SCHEDULES = [
    "1F1B",
    "GPipe",
    "Interleaved1F1B",
    "LoopedBFS",
    "InterleavedZeroBubble",
    "ZBVZeroBubble",
    "DualPipeV",
]


def _grad_norms(run) -> list[float]:
    return [m["grad_norm"] for m in run.metrics if "grad_norm" in m]


# One torchrun launch per world size; each trains several pipelines in one process group.
LAUNCHES = {
    2: [*SCHEDULES, "csv", "comms_csv", "1F1B_microbatch_2"],
    4: ["fsdp", "fsdp_1F1B", "tp", "tp_interleaved", "cp", "cp_microbatch_2"],
    8: ["hsdp_pp", "pp_tp_fsdp"],
}
STEPS = {2: 10, 4: 10, 8: 3}
"""AdamW steps per scenario, by world size: 8 processes on a few cores cost the most, and 3
steps already hold gradients taken after two optimizer updates to one process's."""


@pytest.mark.parametrize("nproc", sorted(LAUNCHES))
def test_pipelined_model_matches_one_process_at_every_step(nproc, tmp_path):
    """Every schedule (a CSV one, and Interleaved1F1B's written with its communication), PP x
    FSDP, PP x TP, PP 2 x CP 2 (1F1B, and GPipe with microbatches of 2 rows; every block sees
    only its rank's half of the sequence), and on 8 ranks HSDP x PP (2 x 2 x 2) and PP x TP x
    FSDP (2 x 2 x 2): the loss, the clipped grad norm and every gradient of each AdamW step equal one process's on the
    same weights to fp32 rounding (``pipeline_check.FP32_TOL``: 1e-4 relative + 1e-5 absolute;
    the norm and loss to 1e-5 relative)."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
        PIPELINE_CHECK_DIR=str(tmp_path),
        PIPELINE_CHECK_STEPS=str(STEPS[nproc]),
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(REPO / "tests" / "dist_scripts" / "pipeline_check.py"),
        *LAUNCHES[nproc],
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    for scenario in LAUNCHES[nproc]:
        assert f"OK {scenario}: {STEPS[nproc]} steps" in done.stdout


def test_titan_train_with_a_pipeline_trains_and_validates_as_one_process(tmp_path):
    """The whole trainer: 10 steps of PP 2 (1F1B, and Interleaved1F1B's 4 stages) and of PP 2 x
    CP 2 against one process accumulating the same 4 micro-batches of 1 row, validating at steps
    1, 5 and 10 through the schedule's forward. The first step is the same bits; later steps drift by fp32
    rounding of the clipping factor, which AdamW amplifies (measured: losses within 7e-5, grad
    norms within 7e-4 relative after 10 steps)."""
    registry = ["--config", "llama3_debugmodel", *SHAPE, *VALIDATION]
    launches = [
        Launch(
            [*registry, "--training.local_batch_size", "1", "--training.global_batch_size", "4"],
            tmp_path / "one",
        ),
        *(
            Launch(
                [
                    *registry,
                    "--training.local_batch_size",
                    "4",
                    *PIPELINE,
                    "--parallelism.pipeline_parallel_schedule",
                    name,
                ],
                tmp_path / name,
                nproc=2,
            )
            for name in ("1F1B", "Interleaved1F1B")
        ),
        # PP 2 x CP 2: one data-parallel rank, so the same 4 rows per step; FSDP shards over the
        # CP ranks, in float32 parameters as the runs without FSDP compute.
        Launch(
            [
                *registry,
                "--training.local_batch_size",
                "4",
                *PIPELINE,
                "--parallelism.context_parallel_degree",
                "2",
                "--training.mixed_precision_param",
                "float32",
            ],
            tmp_path / "cp",
            nproc=4,
        ),
    ]
    one, *pipelined, with_cp = (run.check() for run in titan_trains(launches))
    assert "world size 4 (PP 2, CP 2)" in with_cp.stderr
    assert [m["step"] for m in one.metrics if "loss" in m] == list(range(1, 11))
    assert one.losses[-1] < one.losses[0] - 0.5
    for run in pipelined:
        assert "world size 2 (PP 2)" in run.stderr
        # The same weights and rows: one process's first loss to a float32 ulp (the same bits
        # on an AVX2 CPU; AVX-512 kernels block a stage's GEMMs otherwise, 1 ulp measured).
        assert run.losses[0] == pytest.approx(one.losses[0], rel=FIRST_RTOL)
        # 1F1B adds the microbatches' gradients in the accumulating run's order, and
        # Interleaved1F1B in its own: their first grad norms differ in the last bits only.
        assert _grad_norms(run)[0] == pytest.approx(_grad_norms(one)[0], rel=1e-6)
    for run in [*pipelined, with_cp]:
        assert run.losses == pytest.approx(one.losses, rel=LOSS_RTOL)
        assert _grad_norms(run) == pytest.approx(_grad_norms(one), rel=NORM_RTOL)
        validated = [m for m in run.metrics if "validation_loss" in m]
        expected = [m for m in one.metrics if "validation_loss" in m]
        assert [m["step"] for m in validated] == [m["step"] for m in expected] == [1, 5, 10]
        assert [m["validation_loss"] for m in validated] == pytest.approx(
            [m["validation_loss"] for m in expected], rel=LOSS_RTOL
        )


def test_both_forms_agree_bit_for_bit_under_pipeline_parallel(generated_registry, tmp_path):
    # The debug TOML names Interleaved1F1B: 4 stages, 2 on each rank.
    toml, code = both_forms(
        generated_registry, tmp_path, ["--training.steps", "5", *PIPELINE], nproc=2
    )
    assert "world size 2 (PP 2)" in toml.stderr and "world size 2 (PP 2)" in code.stderr
    assert [m["step"] for m in toml.metrics] == list(range(1, 6))
    assert loss_bits(toml.losses) == loss_bits(code.losses)
    assert loss_bits(_grad_norms(toml)) == loss_bits(_grad_norms(code))
