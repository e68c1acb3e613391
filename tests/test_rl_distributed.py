"""PolicyTrainer under torchrun (2 ranks, FSDP over gloo): ranks that pass different numbers
of micro-batches are refused on every rank with each rank's count, instead of the ranks
waiting in FSDP's collectives until gloo's timeout."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.training_runs import HANG_SECONDS, REPO, child_env

SCRIPT = REPO / "tests" / "dist_scripts" / "policy_counts.py"


# Each call a controller makes, and the name its refusal speaks in.
CALLS = {
    "forward_backward": "forward_backward",
    "cross_entropy_step": "cross_entropy_step",
    "loss_fn": "forward_backward",  # forward_backward with a loss of the caller's
}


@pytest.mark.slow
def test_different_micro_batch_counts_are_refused_on_every_rank(tmp_path):
    """Rank 0 passes 2 micro-batches, rank 1 passes 3, to each call in turn: both ranks print
    the refusal naming both counts, and the launch fails with the ranks' exit status 3."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(SCRIPT),
            str(tmp_path),
            *CALLS,
        ],
        capture_output=True,
        text=True,
        env=dict(child_env(), PYTHONPATH=str(REPO)),
        timeout=HANG_SECONDS,  # a guard: the refusal comes before any collective of the forward
        cwd=REPO,
    )
    text = run.stdout + run.stderr
    assert run.returncode != 0, text
    for call, name in CALLS.items():
        message = (
            f"{name}: the ranks hold different numbers of micro-batches (rank 0: 2, rank 1: 3)"
        )
        for rank in (0, 1):
            assert f"RANK {rank} {call} REFUSED: {message}" in run.stdout, text
    assert not re.search(r"RANK \d \w+ RAN\b", run.stdout)
    # torchrun's summary: the first rank to exit did so with status 3; the other exited
    # non-zero too (3, or the launcher's SIGTERM once the first had failed).
    codes = [int(code) for code in re.findall(r"exitcode\s*:\s*(-?\d+)", run.stderr)]
    assert 3 in codes and all(code != 0 for code in codes), run.stderr
