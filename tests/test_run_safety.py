"""No run is lost: real ``titan-train`` processes killed in the middle of publishing a
checkpoint, finding step folders they cannot load or a damaged one, asked for a ``load_step`` that
does not exist, or diverging to NaN; and ``metrics.jsonl``, which must stay strict JSON and mark
each restart.

Every run is the llama3 debug model on the shipped c4_test set (sequence 64, batch 2), and every
check reads what is on disk afterwards: exit codes, the one-line messages, the checkpoint folders
byte for byte, and ``metrics.jsonl`` parsed as strict JSON.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.run_checks import (
    REGISTRY,
    checkpointed,
    no_traceback,
    snapshot,
    step_folders,
    strict_json_lines,
)
from tests.training_runs import (
    REPO,
    child_env,
    titan_train,
)

# Checkpoints a crash or a person left behind.

KILL_BETWEEN_THE_RENAMES = """
import os, signal, sys

rename = os.rename


def rename_then_die(source, target, *args, **kwargs):
    rename(source, target, *args, **kwargs)
    if str(target).endswith(".replaced"):  # publish()'s first rename is done, the second is not
        os.kill(os.getpid(), signal.SIGKILL)


os.rename = rename_then_die
from titan.train import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory) -> Path:
    """The dump folder of a finished 4-step run checkpointed at steps 2 and 4, which each test
    below starts from (as a copy of its own)."""
    dump = tmp_path_factory.mktemp("four_steps") / "run"
    titan_train([*REGISTRY, *checkpointed(4, interval=2)], dump_folder=dump, legacy=False).check()
    return dump


def copy_of(four_steps: Path, tmp_path: Path) -> Path:
    """A copy of the 4-step run's dump folder as ``tmp_path/run``: a run's checkpoints name no
    absolute path, so the copy is what the run would have written there."""
    dump = tmp_path / "run"
    shutil.copytree(four_steps, dump)
    return dump


@pytest.mark.slow
def test_a_publish_killed_between_its_renames_is_finished_by_the_next_run(four_steps, tmp_path):
    dump = copy_of(four_steps, tmp_path)
    base = [*REGISTRY, *checkpointed(4, interval=2), "--dump_folder", str(dump)]
    assert step_folders(dump) == ["step-2", "step-4"]
    old_step_4 = snapshot(dump / "checkpoint" / "step-4")
    # Resume from step 2 with another learning rate: the new step 4 differs from the old one.
    # Its save renames the old step-4 away and is killed before the new one takes its place.
    again = [*base, "--checkpoint.load_step", "2", "--optimizer.lr", "0.002"]
    killed = subprocess.run(
        [sys.executable, "-c", KILL_BETWEEN_THE_RENAMES, *again],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert step_folders(dump) == ["step-2", "step-4.replaced", "step-4.tmp"]
    new_step_4 = snapshot(dump / "checkpoint" / "step-4.tmp")
    assert new_step_4 != old_step_4 and ".metadata" in new_step_4

    resumed = titan_train(
        [*REGISTRY, *checkpointed(5, interval=2)], dump_folder=dump, legacy=False
    ).check()
    assert f"finished replacing {dump}/checkpoint/step-4, cut short by a crash" in resumed.stderr
    assert f"loaded checkpoint from {dump}/checkpoint/step-4 in" in resumed.stderr
    assert step_folders(dump) == ["step-2", "step-4", "step-5"]
    assert snapshot(dump / "checkpoint" / "step-4") == new_step_4


def _copy_without_hidden_files(source: Path, target: Path) -> None:
    """``cp source/* target/``: the shell's ``*`` skips ``.metadata``."""
    target.mkdir()
    for path in source.iterdir():
        if not path.name.startswith("."):
            (target / path.name).write_bytes(path.read_bytes())


@pytest.mark.slow
def test_step_folders_titan_cannot_load_stop_the_run_and_stay_untouched(four_steps, tmp_path):
    dump = copy_of(four_steps, tmp_path)
    root = dump / "checkpoint"
    args = [*REGISTRY, *checkpointed(8, interval=2, keep=2)]
    for name in ("step-6", "step-1"):  # newer than every checkpoint, then older
        _copy_without_hidden_files(root / "step-4", root / name)
        before = snapshot(dump)
        refused = titan_train(args, dump_folder=dump, legacy=False)
        assert refused.returncode == 1, refused.stderr[-3000:]
        no_traceback(refused.stderr)
        assert f"{root}/{name} (no .metadata file; it holds __0_0.distcp)" in refused.stderr
        assert "`cp -r step-N DEST/` copies it" in refused.stderr
        # Nothing trained, saved, purged or appended: not even metrics.jsonl changed.
        assert snapshot(dump) == before
        (root / name / "__0_0.distcp").unlink()
        (root / name).rmdir()
    # Once the copy is gone the run resumes where it should, from step 4.
    resumed = titan_train(args, dump_folder=dump, legacy=False).check()
    assert f"loaded checkpoint from {root}/step-4 in" in resumed.stderr


@pytest.mark.slow
def test_a_damaged_checkpoint_names_itself_and_the_step_to_go_back_to(four_steps, tmp_path):
    dump = copy_of(four_steps, tmp_path)
    shard = dump / "checkpoint" / "step-4" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    args = [*REGISTRY, *checkpointed(6, interval=2)]
    damaged = titan_train(args, dump_folder=dump, legacy=False)
    assert damaged.returncode == 1, damaged.stderr[-3000:]
    no_traceback(damaged.stderr)
    assert f"{dump}/checkpoint/step-4 is damaged" in damaged.stderr
    assert "--checkpoint.load_step 2" in damaged.stderr
    # Following the hint works: step 2 is loaded, and steps 3-6 are trained again.
    back = titan_train([*args, "--checkpoint.load_step", "2"], dump_folder=dump, legacy=False)
    assert f"loaded checkpoint from {dump}/checkpoint/step-2 in" in back.check().stderr
    assert [m["step"] for m in back.metrics if "loss" in m][-4:] == [3, 4, 5, 6]


@pytest.mark.parametrize(
    ("extra", "wanted"),
    [
        ([], "checkpoint.load_step = 3, but there are no checkpoints: {dump}/checkpoint does "),
        (["--checkpoint.no-enable"], "checkpoint.load_step = 3, but checkpoint.enable is false"),
    ],
    ids=["no-checkpoint-folder", "checkpointing-off"],
)
def test_load_step_that_cannot_be_honoured_is_an_error_not_a_fresh_start(tmp_path, extra, wanted):
    args = [*REGISTRY, "--training.steps", "5", "--checkpoint.enable", "--checkpoint.load_step"]
    run = titan_train([*args, "3", *extra], dump_folder=tmp_path, legacy=False)
    assert run.returncode == 1, run.stderr[-3000:]
    no_traceback(run.stderr)
    assert wanted.format(dump=tmp_path) in run.stderr
    assert not (tmp_path / "metrics.jsonl").exists()


# A diverging run.


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2], ids=["one-process", "torchrun"])
def test_a_diverging_run_stops_before_saving_a_non_finite_step(tmp_path, nproc):
    args = [*REGISTRY, *checkpointed(12, interval=1, keep=2), "--metrics.log_freq", "5"]
    args += ["--optimizer.lr", "1e30"]
    run = titan_train(args, dump_folder=tmp_path, legacy=False, nproc=nproc, timeout=300)
    assert run.returncode == 1, run.stderr[-3000:]
    prog = "titan-train" if nproc == 1 else r"titan-train rank \d"
    failed = re.findall(
        rf"^{prog}: error: step (\d+): the loss or gradient norm is not finite", run.stderr, re.M
    )
    # Every rank stops at the same step (none waits for the others in a collective).
    assert len(failed) == nproc and len(set(failed)) == 1, run.stderr[-3000:]
    if nproc == 1:
        no_traceback(run.stderr)
    bad = int(failed[0])
    assert 1 < bad < 12
    assert f"the newest checkpoint is {tmp_path}/checkpoint/step-{bad - 1}" in run.stderr
    # The purge kept the newest two finite checkpoints; nothing of the bad step was saved.
    assert step_folders(tmp_path) == sorted(f"step-{s}" for s in range(max(1, bad - 2), bad))
    records = strict_json_lines(tmp_path / "metrics.jsonl")
    # The failing step is logged although log_freq would skip it, its non-finite values as null.
    last = records[-1]
    assert last["step"] == bad and None in (last["loss"], last["grad_norm"])


@pytest.mark.slow
def test_on_nonfinite_loss_warn_trains_on_and_metrics_stay_json(tmp_path):
    args = [*REGISTRY, "--training.steps", "6", "--metrics.log_freq", "1"]
    args += ["--optimizer.lr", "1e30", "--training.on_nonfinite_loss", "warn"]
    run = titan_train(args, dump_folder=tmp_path, legacy=False).check()
    warned = re.findall(r"step (\d+): the loss or gradient norm is not finite", run.stderr)
    assert warned and warned[-1] == "6"
    records = strict_json_lines(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert any(r["loss"] is None or r["grad_norm"] is None for r in records)


# metrics.jsonl on its own.


def test_metrics_jsonl_ends_a_torn_line_and_writes_non_finite_values_as_null(tmp_path):
    from titan.components.metric_sinks import JsonlSink

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "lo', encoding="utf-8")  # killed
    sink = JsonlSink(path)
    assert sink.had_records
    sink.write({"step": 3, "loss": float("nan"), "extra": [float("inf"), 1.0]})
    sink.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ['{"step": 1, "loss": 2.5}', '{"step": 2, "lo']
    assert json.loads(lines[2]) == {"step": 3, "loss": None, "extra": [None, 1.0]}


@pytest.mark.parametrize(
    ("earlier", "step", "resumed_from", "marked"),
    [
        (False, 0, None, False),  # a new run in a new folder
        (False, 0, "/seed/step-0", False),  # a new run from an initial checkpoint
        (False, 5, "/run/checkpoint/step-5", True),  # a resume, metrics.jsonl deleted meanwhile
        (True, 0, None, True),  # a rerun from scratch: its steps 1, 2, ... come again
        (True, 5, "/run/checkpoint/step-5", True),  # the usual resume
    ],
)
def test_run_start_is_recorded_when_steps_could_repeat(
    tmp_path, earlier, step, resumed_from, marked
):
    from titan.components.metrics import MetricsProcessor

    path = tmp_path / "metrics.jsonl"
    if earlier:
        path.write_text('{"step": 1, "loss": 2.5}\n', encoding="utf-8")
    metrics = MetricsProcessor.Config().build(
        dump_folder=str(tmp_path),
        rank=0,
        is_logging_rank=True,
        device_type="cpu",
        num_flops_per_token=None,
        peak_flops=None,
    )
    metrics.mark_start(step=step, resumed_from=resumed_from)
    metrics.mark_start(step=step, resumed_from=resumed_from)  # once per run, however called
    metrics.close()
    records = strict_json_lines(path) if path.exists() else []
    starts = [r for r in records if r.get("event") == "run_start"]
    assert len(starts) == int(marked)
    if marked:
        assert (starts[0]["step"], starts[0]["resumed_from"]) == (step, resumed_from)
