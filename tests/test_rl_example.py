"""The GRPO example ``examples/rl/grpo_arithmetic.py``: one real run, in a fresh process, learns
(its mean reward rises by a margin measured over several seeds), samples every step from the
weights pushed the step before, and writes a CSV and a reward-curve PNG; the command line
refuses an output folder that holds files, and bad flags, without touching anything."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys

import pytest
import torch
from PIL import Image

from tests.training_runs import HANG_SECONDS, REPO, child_env

EXAMPLE = REPO / "examples" / "rl" / "grpo_arithmetic.py"
STEPS, SEED = 120, 0
FIRST, LAST = 10, 20
"""The reward of the first ``FIRST`` steps is compared with that of the last ``LAST``."""
MARGIN = 0.25
"""How much higher the last steps' mean reward must be (see ``test_the_policy_learns``)."""


def run_example(*args: str) -> subprocess.CompletedProcess:
    """``python examples/rl/grpo_arithmetic.py ARGS`` with this checkout's titan."""
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        env=dict(child_env(), PYTHONPATH=str(REPO)),
        timeout=HANG_SECONDS,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run of ``STEPS`` steps with seed ``SEED``: its process and output folder."""
    out = tmp_path_factory.mktemp("grpo") / "out"
    done = run_example("--out", str(out), "--steps", str(STEPS), "--seed", str(SEED))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done, out


def read_rows(out) -> list[dict]:
    """``rewards.csv``'s rows."""
    with open(out / "rewards.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_the_policy_learns(run):
    """Mean reward over the last 20 of 120 steps against the first 10 (the defaults: 32
    prompts x 16 samples per step). Measured: seed 0 0.116 -> 0.706 (+0.59), seed 1 +0.54,
    seed 2 +0.52, seed 3 +0.54, seed 5 +0.45. A margin of 0.25 is under half the smallest
    rise, and far above what a policy that does not learn shows (a run that collapsed onto
    one digit rose by +0.03)."""
    rewards = [float(row["mean_reward"]) for row in read_rows(run[1])]
    first, last = sum(rewards[:FIRST]) / FIRST, sum(rewards[-LAST:]) / LAST
    assert last - first > MARGIN, (first, last, rewards)


@pytest.mark.slow
def test_each_step_samples_the_weights_pushed_before_it(run):
    """Step ``n`` sampled with policy version ``n - 1`` (read from the snapshot folder), and the
    folder keeps the last two versions, the newest the last step's."""
    done, out = run
    rows = read_rows(out)
    assert [int(row["step"]) for row in rows] == list(range(1, STEPS + 1))
    assert [int(row["policy_version"]) for row in rows] == list(range(STEPS))
    assert (out / "weights" / "latest").read_text().strip() == f"v{STEPS}"
    assert sorted(os.listdir(out / "weights")) == ["latest", f"v{STEPS - 1}", f"v{STEPS}"]
    assert f"step {STEPS:4d}  mean reward" in done.stdout
    assert f"done: {STEPS} steps" in done.stdout


@pytest.mark.slow
def test_csv_and_plot(run):
    """The CSV has one row per step with every column a number; the PNG opens with pillow at
    the plot's size and is not one colour (axes, gridlines and both curves are drawn)."""
    out = run[1]
    rows = read_rows(out)
    assert list(rows[0]) == ["step", "mean_reward", "loss", "policy_version", "grad_norm"]
    for row in rows:
        assert 0.0 <= float(row["mean_reward"]) <= 1.0
        assert all(value.strip() for value in row.values())
        float(row["loss"]), float(row["grad_norm"])
    with Image.open(out / "reward_curve.png") as image:
        assert image.format == "PNG" and image.size == (720, 420)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is not None and len(colours) > 10
    # The red moving average is drawn: some pixels are strongly red.
    assert any(r > 150 and g < 90 and b < 90 for _, (r, g, b) in colours)


@pytest.mark.slow
def test_an_interrupted_run_writes_the_steps_it_finished(tmp_path):
    """SIGINT (Ctrl-C) after step 2 of 50: exit 130, a one-line message, and the CSV and plot
    of every step the run printed."""
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-u", str(EXAMPLE), "--out", str(out), "--steps", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(child_env(), PYTHONPATH=str(REPO)),
        cwd=REPO,
        # A shell's background job starts with SIGINT ignored; the run must receive it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    printed = []
    for line in process.stdout:
        printed.append(line)
        if line.startswith("step    2 "):
            process.send_signal(signal.SIGINT)
            break
    rest, err = process.communicate(timeout=HANG_SECONDS)
    printed.append(rest)
    steps = sum(line.startswith("step ") for line in "".join(printed).splitlines())
    assert process.returncode == 130, "".join(printed) + err
    assert f"interrupted after {steps} step(s)" in err and "Traceback" not in err
    assert 2 <= steps < 50
    assert [int(row["step"]) for row in read_rows(out)] == list(range(1, steps + 1))
    with Image.open(out / "reward_curve.png") as image:
        assert image.size == (720, 420)


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("file_inside", [], "is not an empty folder"),
        ("is_a_file", [], "is not an empty folder"),
        ("empty", ["--group-size", "1"], "a group needs at least 2 samples"),
        ("empty", ["--steps", "0"], "must be at least 1"),
        ("empty", ["--steps", "many"], "invalid positive value"),
    ],
)
def test_refuses_bad_output_folders_and_flags(tmp_path, setup, args, message):
    """Exit 2 with a one-line reason, no traceback, and the folder or file left as it was."""
    out = tmp_path / "out"
    if setup == "file_inside":
        out.mkdir()
        (out / "rewards.csv").write_text("someone's data\n")
    elif setup == "is_a_file":
        out.write_text("not a folder\n")
    else:
        out.mkdir()
    before = sorted(os.listdir(out)) if out.is_dir() else out.read_text()
    done = run_example("--out", str(out), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert (sorted(os.listdir(out)) if out.is_dir() else out.read_text()) == before
    if setup == "file_inside":
        assert (out / "rewards.csv").read_text() == "someone's data\n"


def load_example():
    """The example's module, imported from its folder (it is not an installed package)."""
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import grpo_arithmetic
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    return grpo_arithmetic


@pytest.mark.parametrize(
    ("rewards", "group_size", "expected"),
    [
        # std 0.5 (the 1e-4 shows); the second group [0, 0, 1, 1] has std 0.577.
        (
            [1, 0, 0, 0, 0, 0, 1, 1],
            4,
            [1.4997, -0.4999, -0.4999, -0.4999, -0.8659, -0.8659, 0.8659, 0.8659],
        ),
        ([0, 0, 0, 1, 1, 1], 3, [0.0] * 6),  # no spread: nothing to learn from either group
        ([1, 0, 0, 1, 1, 1], 2, [0.707, -0.707, -0.707, 0.707, 0.0, 0.0]),
        ([0.5, 0.25, 1.0, 0.25], 4, [0.0, -0.7069, 1.4138, -0.7069]),  # graded rewards
    ],
)
def test_group_advantages(rewards, group_size, expected):
    """``(r - mean) / (std + 1e-4)`` within each consecutive group, independently."""
    example = load_example()
    got = example.group_advantages(torch.tensor(rewards, dtype=torch.float32), group_size)
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-4, rtol=0)
