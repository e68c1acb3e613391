"""The trainer as a library (forward_backward, optim_step, checkpoints, model_state_dict,
close): against train()'s own step bit for bit, against a hand-computed global per-token loss,
and refusing misuse with a clear TrainerUsageError.

One plain process runs the one-process scenarios and writes the bf16 Hugging Face weights that
the two-process launch (FSDP 2 and TP 2 side by side, then pipeline parallel) must reproduce
bit for bit (and EP 2 those of the deepseek_v3 MoE model). Each launch is a real run of ``tests/dist_scripts/library_check.py``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.training_runs import HANG_SECONDS, REPO, child_env

pytestmark = pytest.mark.slow  # every test here trains for real

SCRIPT = REPO / "tests" / "dist_scripts" / "library_check.py"
ONE_PROCESS = [
    "same_as_train:one",
    "accumulation:one",
    "state_dict:one",
    "state_dict:moe",
    "float8:one",
    "checkpoints:one",
    "misuse:one",
]
TWO_PROCESSES = [
    "same_as_train:fsdp2",
    "same_as_train:tp2",
    "accumulation:fsdp2",
    "accumulation:tp2",
    "same_as_train:tp2_loss_parallel",
    "accumulation:tp2_loss_parallel",
    "state_dict:fsdp2",
    "state_dict:tp2",
    "state_dict:ep2",
    "one_rank_refuses:fsdp2",
    "pipeline:pp2",
]

REFERENCES = ("hf_bf16_dense.pt", "hf_bf16_moe.pt")
"""The one-process bf16 Hugging Face weights (llama3, deepseek_v3) that every layout must give."""


def launch(folder, scenarios: list[str], *, nproc: int) -> subprocess.CompletedProcess:
    """``library_check.py FOLDER SCENARIO...``: plain python for one process, else torchrun."""
    runner = [sys.executable]
    if nproc > 1:
        runner += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    return subprocess.run(
        [*runner, str(SCRIPT), str(folder), *scenarios],
        capture_output=True,
        text=True,
        env=dict(child_env(), PYTHONPATH=str(REPO)),
        timeout=HANG_SECONDS,
        cwd=REPO,
    )


def check(done: subprocess.CompletedProcess, scenarios: list[str]) -> None:
    """The launch succeeded and said OK for every scenario."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    missing = [name for name in scenarios if f"OK {name}:" not in done.stdout]
    assert missing == [], done.stdout[-3000:]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The one-process launch and its folder (which holds the ``REFERENCES``)."""
    folder = tmp_path_factory.mktemp("library")
    return launch(folder, ONE_PROCESS, nproc=1), folder


def test_library_calls_in_one_process(one_process):
    """train() parity, accumulation, bf16 HF weights, float8, checkpoints and misuse."""
    done, folder = one_process
    check(done, ONE_PROCESS)
    assert {path.name for path in folder.glob("hf_bf16_*.pt")} == set(REFERENCES)


def test_library_calls_under_fsdp_tp_and_pipeline(one_process, tmp_path):
    """The same under FSDP 2, TP 2 (loss parallel off and on) and EP 2 in one launch; every
    call refused under PP 2."""
    done, folder = one_process
    assert done.returncode == 0, "the one-process launch failed; see its test"
    for name in REFERENCES:
        (tmp_path / name).symlink_to(folder / name)
    check(launch(tmp_path, TWO_PROCESSES, nproc=2), TWO_PROCESSES)
