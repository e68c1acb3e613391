"""CheckpointManager on CPU with a two-layer model: when it saves, what it restores (exactly),
exports, crash safety under SIGKILL, background saves, and FSDP2 shards on two processes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.dist_scripts.checkpoint_killed_save import BALLAST
from tests.tiny_checkpoint_run import RenamingAdapter, tiny_run
from titan.components.checkpoint import CheckpointError

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "dist_scripts"


def steps_on_disk(dump: Path) -> list[str]:
    return sorted(os.listdir(dump / "checkpoint"))


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(got[key], value), key


def bytes_in(folder: Path) -> int:
    try:
        return sum(path.stat().st_size for path in folder.iterdir())
    except FileNotFoundError:
        return 0


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def test_saves_on_interval_first_and_last_step_and_keeps_the_latest_k(tmp_path):
    run = tiny_run(str(tmp_path), interval=3, keep_latest_k=2, enable_first_step_checkpoint=True)
    saved = [step for step in range(1, 11) if run.manager.should_save(step, last_step=step == 10)]
    assert saved == [1, 3, 6, 9, 10]
    for step in range(1, 10):
        run.train()
        run.manager.save(step)
    assert steps_on_disk(tmp_path) == ["step-6", "step-9"]
    run.manager.save(10, last_step=True)  # an export; it does not purge
    assert steps_on_disk(tmp_path) == ["step-10", "step-6", "step-9"]


def test_load_only_and_disabled_never_save(tmp_path):
    assert not tiny_run(str(tmp_path), load_only=True).manager.should_save(5, last_step=True)
    disabled = tiny_run(str(tmp_path), enable=False)
    assert not disabled.manager.should_save(500)
    assert disabled.manager.load() is False


def test_resume_restores_model_optimizer_data_position_and_rng_exactly(tmp_path, caplog):
    run = tiny_run(str(tmp_path), interval=2)
    run.train(2)
    with caplog.at_level(logging.INFO, logger="titan"):
        run.manager.save(2)
    params, moments = run.params(), run.optimizer_tensors()
    draws = run.draws()
    run.train(3)

    torch.manual_seed(7)
    resumed = tiny_run(str(tmp_path), interval=2)
    with caplog.at_level(logging.INFO, logger="titan"):
        assert resumed.manager.load() is True
    assert_same(resumed.params(), params)
    assert_same(resumed.optimizer_tensors(), moments)
    assert len(moments) == 12  # step, exp_avg, exp_avg_sq for four tensors
    assert resumed.draws() == draws
    assert (resumed.loader.value, resumed.train_state.value) == (8, 2)
    assert "checkpoint of step 2" in caplog.text and "loaded checkpoint from" in caplog.text


def test_load_step_and_exclude_from_loading(tmp_path):
    run = tiny_run(str(tmp_path), interval=1, keep_latest_k=0)
    run.train()
    run.manager.save(1)
    step_one = run.params()
    run.train()
    run.manager.save(2)

    resumed = tiny_run(str(tmp_path), exclude_from_loading=["optimizer", "dataloader"])
    assert resumed.manager.load(step=1)
    assert_same(resumed.params(), step_one)
    assert resumed.optimizer_tensors() == {}  # untouched: AdamW has no state yet
    assert (resumed.loader.value, resumed.train_state.value) == (0, 1)
    with pytest.raises(CheckpointError, match=r"load_step = 5.*has steps \[1, 2\]"):
        resumed.manager.load(step=5)
    with pytest.raises(CheckpointError, match="exclude_from_loading names \\['rng_state'\\]"):
        tiny_run(str(tmp_path), exclude_from_loading=["rng_state"])


def test_last_step_model_only_export_in_bfloat16_starts_a_new_run(tmp_path):
    run = tiny_run(str(tmp_path / "a"), export_dtype="bfloat16")
    run.train()
    run.manager.save(4, last_step=True)
    export = tmp_path / "a" / "checkpoint" / "step-4"
    metadata = torch.distributed.checkpoint.FileSystemReader(str(export)).read_metadata()
    stored = metadata.state_dict_metadata
    assert sorted(stored) == ["inp.bias", "inp.weight", "out.bias", "out.weight"]
    assert {meta.properties.dtype for meta in stored.values()} == {torch.bfloat16}

    fresh = tiny_run(str(tmp_path / "b"), initial_load_path=str(export))
    assert fresh.manager.load()
    want = {key: value.bfloat16().float() for key, value in run.params().items()}
    assert_same(fresh.params(), want)
    assert fresh.optimizer_tensors() == {}

    # The run's own folder: a model-only checkpoint cannot resume training.
    again = tiny_run(str(tmp_path / "a"))
    with pytest.raises(CheckpointError, match="no 'optimizer' state.*model-only"):
        again.manager.load()


@pytest.mark.parametrize("sharded", [False, True], ids=["one-file", "adapter-shards"])
def test_hugging_face_export_and_import_round_trip(tmp_path, sharded):
    from safetensors.torch import load_file

    adapter = RenamingAdapter(sharded=sharded)
    run = tiny_run(str(tmp_path / "a"), sd_adapter=adapter, last_save_in_hf=True)
    run.train()
    run.manager.save(3, last_step=True)
    export = tmp_path / "a" / "checkpoint" / "step-3"
    files = sorted(p.name for p in export.iterdir())
    if sharded:
        assert files == [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
        ]
        index = json.loads((export / "model.safetensors.index.json").read_text())
        assert index["weight_map"]["hf.out.bias"] == "model-00002-of-00002.safetensors"
    else:
        assert files == ["config.json", "model.safetensors"]
        keys = set(load_file(export / "model.safetensors"))
        assert keys == {"hf.inp.weight", "hf.inp.bias", "hf.out.weight", "hf.out.bias"}
    assert json.loads((export / "config.json").read_text())["model_type"] == "tiny"

    fresh = tiny_run(
        str(tmp_path / "b"),
        sd_adapter=adapter,
        initial_load_path=str(export),
        initial_load_in_hf=True,
    )
    assert fresh.manager.load()
    assert_same(fresh.params(), run.params())


def test_seed_checkpoint_is_model_only_and_starts_the_next_run(tmp_path):
    seeder = tiny_run(str(tmp_path), create_seed_checkpoint=True)
    seeder.manager.save_seed()
    assert steps_on_disk(tmp_path) == ["step-0"]
    run = tiny_run(str(tmp_path))
    assert run.manager.load()
    assert_same(run.params(), seeder.params())
    assert run.train_state.value == 0 and run.optimizer_tensors() == {}


def test_incomplete_folders_are_ignored_and_removed(tmp_path, caplog):
    run = tiny_run(str(tmp_path), interval=1)
    run.train()
    run.manager.save(1)
    params = run.params()
    root = tmp_path / "checkpoint"
    # A save killed before it was published, with a metadata file that even looks complete.
    (root / "step-2.tmp").mkdir()
    (root / "step-2.tmp" / ".metadata").write_bytes(b"half")
    (root / "step-3.deleting").mkdir()

    resumed = tiny_run(str(tmp_path), interval=1)
    with caplog.at_level(logging.WARNING, logger="titan"):
        assert resumed.manager.load()
    assert_same(resumed.params(), params)
    assert steps_on_disk(tmp_path) == ["step-1"]
    assert "step-2.tmp, left by a save that did not finish" in caplog.text


def test_async_save_is_published_when_written_and_loads(tmp_path, caplog):
    mode = "async_with_pinned_mem"  # without CUDA it falls back to "async", saying so
    with caplog.at_level(logging.WARNING, logger="titan"):
        run = tiny_run(str(tmp_path), interval=1, keep_latest_k=2, async_mode=mode)
    assert run.manager.writer.async_mode == ("async" if not torch.cuda.is_available() else mode)
    assert torch.cuda.is_available() or "needs CUDA; using 'async'" in caplog.text
    for step in (1, 2, 3):
        run.train()
        run.manager.save(step)
        if step == 3:
            params = run.params()
        run.manager.maybe_wait_for_staging()
    run.train()  # the weights change while step 3 may still be writing
    run.manager.close()
    assert steps_on_disk(tmp_path) == ["step-2", "step-3"]

    resumed = tiny_run(str(tmp_path))
    assert resumed.manager.load()
    assert_same(resumed.params(), params)


def test_user_mistakes_are_checkpoint_errors(tmp_path):
    def load(path, **config):
        return tiny_run(str(tmp_path / "run"), initial_load_path=str(path), **config).manager.load()

    with pytest.raises(CheckpointError, match="is not a folder"):
        load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="not a DCP checkpoint folder"):
        load(tmp_path / "empty")

    source = tiny_run(str(tmp_path / "src"), interval=1)
    source.manager.save(1)
    source.manager.save(2)
    root = tmp_path / "src" / "checkpoint"
    with pytest.raises(CheckpointError, match="point at a step folder.*step-2"):
        load(root)
    with pytest.raises(CheckpointError, match="another shape.*inp.weight: saved \\[16, 8\\]"):
        tiny_run(
            str(tmp_path / "wide"), hidden=32, initial_load_path=str(root / "step-1")
        ).manager.load()
    with pytest.raises(
        CheckpointError, match="no \\*.safetensors files; checkpoint.initial_load_in_hf"
    ):
        load(root / "step-1", initial_load_in_hf=True, sd_adapter=RenamingAdapter())
    with pytest.raises(CheckpointError, match="keep_latest_k must be 0"):
        tiny_run(str(tmp_path), keep_latest_k=1)
    with pytest.raises(CheckpointError, match="last_save_in_hf needs a model with a state-dict"):
        tiny_run(str(tmp_path), last_save_in_hf=True)

    (root / "step-1" / ".metadata").write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load(root / "step-1")
    data = next((root / "step-2").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="loading .*step-2 failed"):
        load(root / "step-2")


@pytest.mark.slow
def test_sigkill_during_a_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    in_progress = tmp_path / "checkpoint" / "step-2.tmp"
    deadline = time.monotonic() + 600  # a hang guard only: the kill follows the bytes written
    with subprocess.Popen(
        [sys.executable, str(SCRIPTS / "checkpoint_killed_save.py"), str(tmp_path)],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as saver:
        try:
            # Kill once the second save has written 16 MB of its 128 MB (or, should it win
            # the race, once it is published).
            while bytes_in(in_progress) < 16 * 2**20 and not in_progress.with_suffix("").exists():
                assert saver.poll() is None, saver.stderr.read().decode()
                assert time.monotonic() < deadline, "the second save never started"
                time.sleep(0.001)
            os.kill(saver.pid, signal.SIGKILL)
        finally:
            saver.kill()
    complete = [name for name in steps_on_disk(tmp_path) if "." not in name]
    # The kill normally lands in step 2's write; if that write won the race, the same checks
    # apply to the newest complete step.
    latest = max(int(name.removeprefix("step-")) for name in complete)

    resumed = tiny_run(str(tmp_path), ballast=BALLAST, interval=1)
    assert resumed.manager.load()
    for key, value in resumed.params().items():
        assert torch.equal(value, torch.full_like(value, latest)), key
    assert resumed.train_state.value == latest
    assert all("." not in name for name in steps_on_disk(tmp_path))


@pytest.mark.slow
def test_fsdp_sharded_checkpoint_on_two_processes(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(SCRIPTS / "checkpoint_fsdp.py"),
            str(tmp_path),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert "OK" in done.stdout
    assert sorted(os.listdir(tmp_path / "checkpoint" / "step-2")) == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    ]


def test_the_checkpoint_package_imports_one_way():
    """No module of titan/components/checkpoint imports one that imports it back (also through
    imports inside functions)."""
    import ast

    package = REPO / "titan" / "components" / "checkpoint"
    name = "titan.components.checkpoint"
    modules = {
        (name if path.stem == "__init__" else f"{name}.{path.stem}"): path
        for path in package.glob("*.py")
    }
    assert len(modules) >= 6
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                named = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            else:
                continue
            edges[module] |= {target for target in named if target in modules} - {module}
    order: list[str] = []
    remaining = dict(edges)
    while remaining:
        leaves = [m for m, targets in remaining.items() if targets <= set(order)]
        assert leaves, f"import cycle among {sorted(remaining)}"
        order += sorted(leaves)
        for leaf in leaves:
            del remaining[leaf]
    assert order[0] == f"{name}.errors" and order[-1] == name


def _crash_after_the_first_rename(monkeypatch) -> None:
    """Make the next publish of an existing step stop right after renaming it away."""
    from titan.components.checkpoint import folders

    rename = os.rename

    def rename_then_crash(source, target):
        rename(source, target)
        if str(target).endswith(".replaced"):
            monkeypatch.setattr(folders.os, "rename", rename)
            raise SystemExit("killed")

    monkeypatch.setattr(folders.os, "rename", rename_then_crash)


@pytest.mark.parametrize("new_copy_complete", [True, False], ids=["new-copy", "torn-new-copy"])
def test_a_publish_cut_between_its_renames_is_finished_on_the_next_load(
    tmp_path, monkeypatch, caplog, new_copy_complete
):
    run = tiny_run(str(tmp_path), interval=1)
    run.train()
    run.manager.save(2)
    old = run.params()
    run.train()
    new = run.params()
    _crash_after_the_first_rename(monkeypatch)
    with pytest.raises(SystemExit):
        run.manager.save(2)
    assert steps_on_disk(tmp_path) == ["step-2.replaced", "step-2.tmp"]
    if not new_copy_complete:
        (tmp_path / "checkpoint" / "step-2.tmp" / ".metadata").unlink()

    resumed = tiny_run(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="titan"):
        assert resumed.manager.load()
    assert_same(resumed.params(), new if new_copy_complete else old)
    assert steps_on_disk(tmp_path) == ["step-2"]
    kept = "the new copy" if new_copy_complete else "the old copy"
    assert f"finished replacing {tmp_path}/checkpoint/step-2, cut short by a crash ({kept})" in (
        caplog.text
    )


def test_load_step_names_what_the_folder_holds(tmp_path):
    def load(step, **config):
        return tiny_run(str(tmp_path), **config).manager.load(step=step)

    with pytest.raises(CheckpointError, match=r"there are no checkpoints: .*checkpoint does not"):
        load(3)
    with pytest.raises(CheckpointError, match="load_step = 3, but checkpoint.enable is false"):
        load(3, enable=False)
    (tmp_path / "checkpoint").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoint to resume from"):
        load(3)
    # A run that has an initial load configured is no excuse to ignore load_step either.
    with pytest.raises(CheckpointError, match="holds no checkpoint to resume from"):
        load(3, initial_load_path=str(tmp_path))
    export = tiny_run(str(tmp_path), sd_adapter=RenamingAdapter(), last_save_in_hf=True)
    export.manager.save(3, last_step=True)
    with pytest.raises(CheckpointError, match="step-3 is a Hugging Face export, which cannot"):
        load(3)


def test_a_step_folder_titan_did_not_write_is_never_loaded_purged_or_replaced(tmp_path):
    run = tiny_run(str(tmp_path), interval=1, keep_latest_k=2)
    for step in (1, 2):
        run.train()
        run.manager.save(step)
    root = tmp_path / "checkpoint"
    copied = root / "step-5"
    copied.mkdir()
    (copied / "__0_0.distcp").write_bytes((root / "step-2" / "__0_0.distcp").read_bytes())
    with pytest.raises(CheckpointError) as error:
        tiny_run(str(tmp_path)).manager.load()
    assert f"{copied} (no .metadata file; it holds __0_0.distcp): not a checkpoint" in str(
        error.value
    )
    # Saves go on around it: the purge neither counts nor deletes it, a save of its step stops.
    for step in (3, 4):
        run.train()
        run.manager.save(step)
    assert steps_on_disk(tmp_path) == ["step-3", "step-4", "step-5"]
    with pytest.raises(CheckpointError, match="step-5 exists and is not a checkpoint titan"):
        run.manager.save(5)
    assert sorted(os.listdir(copied)) == ["__0_0.distcp"]


@pytest.mark.parametrize("earlier", [True, False], ids=["earlier-step", "only-step"])
def test_a_damaged_checkpoint_names_the_earlier_one_to_load(tmp_path, earlier):
    from titan.components.checkpoint import DamagedCheckpoint

    run = tiny_run(str(tmp_path), interval=1, keep_latest_k=0)
    for step in (1, 2, 3) if earlier else (3,):
        run.train()
        run.manager.save(step)
    shard = next((tmp_path / "checkpoint" / "step-3").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(DamagedCheckpoint) as error:
        tiny_run(str(tmp_path)).manager.load()
    message = str(error.value)
    assert f"loading {tmp_path}/checkpoint/step-3 failed" in message
    if earlier:
        assert f"The newest earlier checkpoint is {tmp_path}/checkpoint/step-2" in message
        assert "--checkpoint.load_step 2" in message
        assert tiny_run(str(tmp_path)).manager.load(step=2)
    else:
        assert "there is no earlier checkpoint: move it out of" in message


def test_save_on_stop_saves_the_step_unless_the_schedule_just_did(tmp_path):
    run = tiny_run(str(tmp_path), interval=4)
    run.train()
    assert run.manager.save_on_stop(1) == str(tmp_path / "checkpoint" / "step-1")
    run.train()
    run.manager.save(4)
    assert run.manager.save_on_stop(4) == str(tmp_path / "checkpoint" / "step-4")
    assert steps_on_disk(tmp_path) == ["step-1", "step-4"]
    assert tiny_run(str(tmp_path / "off"), enable=False).manager.save_on_stop(3) is None


def test_a_signal_inside_a_dcp_call_stays_a_signal(tmp_path):
    """DCP wraps whatever stops a rank in a CheckpointException; a KeyboardInterrupt must come out
    as itself (the user's stop), not as a checkpoint failure that exits 1."""
    import torch.distributed.checkpoint as dcp

    from titan.components.checkpoint.state import translated_errors

    with pytest.raises(KeyboardInterrupt):
        with translated_errors("saving step 3"):
            raise dcp.CheckpointException("save", {0: (KeyboardInterrupt(), None)})
    with pytest.raises(CheckpointError, match="saving step 3 failed: OSError: disk full"):
        with translated_errors("saving step 3"):
            raise dcp.CheckpointException("save", {0: (OSError("disk full"), None)})
