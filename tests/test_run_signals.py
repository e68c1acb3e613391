"""SIGINT and SIGTERM: a real ``titan-train`` stops after the current step with that step
saved (exit 130 / 143, one line), a second signal stops at once without damaging the previous
checkpoint, and under torchrun every rank stops after the same step whoever got the signal."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.run_checks import (
    REGISTRY,
    checkpointed,
    no_traceback,
    step_folders,
    strict_json_lines,
)
from tests.training_runs import (
    HANG_SECONDS,
    REPO,
    child_env,
    launch,
    signal_when,
    titan_train,
)

# Signals.


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "verb"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_stops_after_the_current_step_with_it_saved(tmp_path, sig, code, verb):
    args = [*REGISTRY, *checkpointed(10000, interval=3), "--dump_folder", str(tmp_path)]
    process = launch(args, stderr=subprocess.PIPE)
    signal_when(process, (tmp_path / "checkpoint" / "step-3").is_dir, sig)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == code, stderr[-4000:]
    no_traceback(stderr)
    last = stderr.strip().splitlines()[-1]
    found = re.fullmatch(
        rf"titan-train: {verb} by {sig.name} after step (\d+); its newest checkpoint is "
        rf"{tmp_path}/checkpoint/step-(\d+); a new run with this dump folder resumes there",
        last,
    )
    assert found and found[1] == found[2], last
    stopped = int(found[1])
    assert f"{sig.name} received: stopping after this step" in stderr
    assert f"step-{stopped}" in step_folders(tmp_path)
    assert all("." not in name for name in step_folders(tmp_path))  # nothing half-written
    assert not (tmp_path / "titan-train.lock").exists()

    resumed = titan_train(
        [*REGISTRY, *checkpointed(stopped + 2, interval=3)], dump_folder=tmp_path, legacy=False
    ).check()
    assert f"loaded checkpoint from {tmp_path}/checkpoint/step-{stopped} in" in resumed.stderr
    records = strict_json_lines(tmp_path / "metrics.jsonl")
    start = [r for r in records if r.get("event") == "run_start"]
    assert len(start) == 1 and start[0]["step"] == stopped
    assert start[0]["resumed_from"] == f"{tmp_path}/checkpoint/step-{stopped}"
    after = records[records.index(start[0]) + 1 :]
    assert [r["step"] for r in after] == [stopped + 1, stopped + 2]


HELD_SAVE = Path(__file__).parent / "held_save.py"


@pytest.mark.slow
def test_a_second_signal_abandons_the_stopping_save_and_keeps_the_last_checkpoint(tmp_path):
    """The second SIGTERM is sent once the run has said it is stopping, the save it stops for is
    mid-write (held there, as by a stalled disk, until the run ends) and the run's window for a
    forwarded copy of the first signal has passed: every step of it is one the run reported."""
    from titan.training.stopping import StopRequests

    dump = tmp_path / "run"
    root = dump / "checkpoint"
    args = [*REGISTRY, *checkpointed(10000, interval=2), "--dump_folder", str(dump)]
    process = subprocess.Popen(
        [sys.executable, str(HELD_SAVE), *args],
        cwd=REPO,
        env=child_env(TITAN_TEST_HOLD=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        signal_when(process, (root / "step-2").is_dir, signal.SIGTERM)
        lines = []

        def reported(text: str) -> float:
            """Read the run's output up to a line containing ``text``; when it was read."""
            for line in process.stderr:
                lines.append(line)
                if text in line:
                    return time.monotonic()
            raise AssertionError(f"the run ended before printing {text!r}:\n{''.join(lines)}")

        # The run notes the time of the first signal just before it prints this line.
        received = reported("SIGTERM received: stopping after this step")
        reported("held: ")  # the save is now mid-write, and stays so until the run ends
        held_folder = lines[-1].removeprefix("held: ").strip()
        # Sooner than this after the first, a signal counts as the same one (forwarded).
        while time.monotonic() <= received + StopRequests.REPEAT_WINDOW_S:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = "".join(lines) + rest
    assert process.returncode == 143, stderr[-4000:]
    no_traceback(stderr)
    last = stderr.strip().splitlines()[-1]
    found = re.fullmatch(
        rf"titan-train: terminated at once by a second SIGTERM during step \d+; the newest "
        rf"checkpoint is {root}/step-(\d+) \(a save that was cut short is removed by the next "
        r"run\)",
        last,
    )
    assert found, last
    # Every save after the first signal was held: the newest is the one the test waited for.
    assert found[1] == "2", last
    assert (root / "step-2" / ".metadata").is_file()
    assert re.fullmatch(r"step-\d+\.tmp", held_folder) and (root / held_folder).is_dir()
    assert not (root / held_folder / ".metadata").exists()  # cut short mid-write
    resumed = titan_train(
        [*REGISTRY, *checkpointed(3, interval=2)], dump_folder=dump, legacy=False
    ).check()
    assert f"loaded checkpoint from {root}/step-2 in" in resumed.stderr
    assert all("." not in name for name in step_folders(dump))


def _workers(launcher: subprocess.Popen) -> list[int]:
    """The pids of torchrun's worker processes (its children)."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    return [int(pid) for pid in children.read_text().split()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "sig"),
    [
        ("launcher", signal.SIGTERM),
        ("one-worker", signal.SIGTERM),
        ("process-group", signal.SIGINT),
    ],
    ids=["torchrun-sigterm", "one-rank-sigterm", "ctrl-c"],
)
def test_a_signal_under_torchrun_stops_every_rank_after_the_same_step(tmp_path, target, sig):
    """SIGTERM to torchrun, which forwards it to every rank; SIGTERM to one rank alone (a stray
    kill) must not leave the others waiting in a collective; Ctrl-C reaches every process of the
    group and torchrun forwards it again: one request, not a second signal that aborts."""
    args = [*REGISTRY, *checkpointed(10000, interval=2), "--dump_folder", str(tmp_path)]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + ["-m", "titan.train", *args],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a job under a terminal or scheduler
    )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "checkpoint" / "step-2").is_dir():
            assert launcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        if target == "launcher":
            launcher.send_signal(sig)
        elif target == "one-worker":
            os.kill(max(_workers(launcher)), sig)
        else:
            os.killpg(launcher.pid, sig)
        _, stderr = launcher.communicate(timeout=HANG_SECONDS)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    verb = {signal.SIGTERM: "terminated", signal.SIGINT: "interrupted"}[sig]
    stops = re.findall(
        rf"^titan-train rank (\d): {verb} by {sig.name} after step (\d+); its newest checkpoint "
        r"is \S+/step-(\d+);",
        stderr,
        re.M,
    )
    assert sorted(rank for rank, _, _ in stops) == ["0", "1"], stderr[-5000:]
    assert len({(step, saved) for _, step, saved in stops}) == 1, stops
    step = stops[0][1]
    assert stops[0][2] == step
    saved = sorted(os.listdir(tmp_path / "checkpoint" / f"step-{step}"))
    assert saved == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert launcher.returncode != 0


# How run() reports each early ending (stand-ins for the trainer; the real runs are above).


class _Trainer:
    def __init__(self, error: BaseException, closed: list[str]) -> None:
        self.error, self.closed = error, closed

    def train(self) -> None:
        raise self.error

    def close(self) -> None:
        self.closed.append("closed")


class _Config:
    def __init__(self, error: BaseException, dump_folder: Path) -> None:
        self.error, self.dump_folder, self.closed = error, str(dump_folder), []

    def build(self) -> _Trainer:
        return _Trainer(self.error, self.closed)


@pytest.mark.parametrize(
    ("error", "code", "wanted"),
    [
        ("stopped", 143, "titan-train rank 1: terminated by SIGTERM after step 7; ...\n"),
        ("terminated", 143, "titan-train rank 1: terminated\n"),
        ("nonfinite", 1, "titan-train rank 1: error: step 3: the loss is nan\n"),
    ],
)
def test_run_reports_each_early_ending_in_one_line_and_closes(tmp_path, error, code, wanted):
    from titan.train import run
    from titan.training.errors import RunFailure
    from titan.training.stopping import NonFiniteLoss, RunStopped, Terminated

    errors = {
        "stopped": RunStopped("terminated by SIGTERM after step 7; ...", signum=signal.SIGTERM),
        "terminated": Terminated(),
        "nonfinite": NonFiniteLoss("step 3: the loss is nan"),
    }
    error_file = tmp_path / "error.json"
    stderr = io.StringIO()
    failure = RunFailure(rank=1, world_size=2, error_file=str(error_file), stderr=stderr)
    config = _Config(errors[error], tmp_path)
    assert run(config, failure=failure) == code
    assert stderr.getvalue() == wanted
    assert config.closed == ["closed"]
    # torchrun's failure summary shows the same line.
    assert json.loads(error_file.read_text())["message"]["message"] == wanted.rstrip("\n")
