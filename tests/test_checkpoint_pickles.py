"""Nothing in a checkpoint runs code: a ``.metadata`` index or a ``.distcp`` entry that asks for
more than plain data when unpickled is refused by name, before anything of it runs, and the
checkpoints in the folder stay as they were. Real ``titan-train`` runs resume a real checkpoint
with something planted in its newest step."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from tests.tiny_checkpoint_run import tiny_run
from tests.training_runs import SEED, SMALL, titan_train
from titan.components.checkpoint import CheckpointError, UnsafeCheckpoint

ARGS = [
    "--config",
    "llama3_debugmodel",
    *SMALL,
    *SEED,
    "--checkpoint.enable",
    "--checkpoint.interval",
    "1",
    "--checkpoint.keep_latest_k",
    "0",
]


class Command:
    """Unpickled, runs ``code`` with ``call`` (``os.system``, ``exec``, ...)."""

    def __init__(self, call, code: str) -> None:
        self.call, self.code = call, code

    def __reduce__(self):
        return (self.call, (self.code,))


def touch(marker: Path, how: str) -> Command:
    """A pickle payload that creates ``marker`` through ``how``."""
    if how == "os.system":
        return Command(os.system, f"touch {marker}")
    if how == "exec":
        return Command(exec, f"open({str(marker)!r}, 'w').close()")
    return Command(eval, f"open({str(marker)!r}, 'w').close()")


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by relative path, with its SHA-256."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A dump folder with the full checkpoints of steps 1 and 2 of a real run."""
    dump = tmp_path_factory.mktemp("saved")
    titan_train([*ARGS, "--training.steps", "2"], dump_folder=dump, legacy=False).check()
    assert sorted(os.listdir(dump / "checkpoint")) == ["step-1", "step-2"]
    return dump


def copy_of(saved: Path, tmp_path: Path) -> Path:
    dump = tmp_path / "dump"
    shutil.copytree(saved, dump)
    return dump


def plant_metadata(step: Path, marker: Path, where: str) -> None:
    """Replace ``step/.metadata`` by one that runs code: as the whole file, or inside the real
    index (its planner data, or a save's module list)."""
    path = step / ".metadata"
    if where == "whole":
        path.write_bytes(pickle.dumps(touch(marker, "os.system")))
        return
    metadata = pickle.loads(path.read_bytes())  # the test's own file
    if where == "planner_data":
        metadata.planner_data = touch(marker, "exec")
    else:
        metadata.storage_meta.modules = [touch(marker, "eval")]
    path.write_bytes(pickle.dumps(metadata))


def plant_entry(step: Path, key: str, marker: Path) -> str:
    """Point the checkpoint's entry ``key`` at a ``torch.save``d payload appended to its shard;
    returns the shard's path."""
    meta_path = step / ".metadata"
    metadata = pickle.loads(meta_path.read_bytes())
    ((index, info),) = [(i, s) for i, s in metadata.storage_data.items() if i.fqn == key]
    shard = step / info.relative_path
    payload = io.BytesIO()
    torch.save({"position": touch(marker, "os.system")}, payload)
    offset = shard.stat().st_size
    with open(shard, "ab") as file:
        file.write(payload.getvalue())
    metadata.storage_data[index] = dataclasses.replace(
        info, offset=offset, length=len(payload.getvalue())
    )
    meta_path.write_bytes(pickle.dumps(metadata))
    return str(shard)


def resume_refused(dump: Path, marker: Path) -> str:
    """Resume ``dump``: the run must refuse before training, leave every checkpoint file as it
    was and never create ``marker``; returns its stderr."""
    before = digests(dump / "checkpoint")
    run = titan_train([*ARGS, "--training.steps", "3"], dump_folder=dump, legacy=False)
    assert run.returncode != 0, run.stderr[-3000:]
    assert not marker.exists()
    assert "Traceback" not in run.stderr
    assert digests(dump / "checkpoint") == before
    assert [m["step"] for m in run.metrics if "loss" in m] == [1, 2]  # nothing trained
    return run.stderr


@pytest.mark.parametrize("where", ["whole", "planner_data", "storage_meta"])
def test_a_planted_metadata_is_refused_before_it_runs(saved, tmp_path, where):
    dump, marker = copy_of(saved, tmp_path), tmp_path / "MARKER"
    plant_metadata(dump / "checkpoint" / "step-2", marker, where)
    stderr = resume_refused(dump, marker)
    asks = {"whole": "posix.system", "planner_data": "builtins.exec", "storage_meta": "eval"}
    assert f"error: {dump}/checkpoint/step-2/.metadata asks for" in stderr
    assert asks[where] in stderr
    assert "could run code" in stderr and "damaged" not in stderr
    assert "checkpoint.load_step = 1" in stderr  # the earlier one, left for the user to judge


@pytest.mark.parametrize(
    "key",
    [
        "dataloader.dp_rank_0",
        "optimizer.param_groups.tok_embeddings.weight.lr",
        "rng.rank_0.python",
        "train_state.step",
    ],
)
def test_a_planted_entry_in_a_shard_is_refused_before_it_runs(saved, tmp_path, key):
    dump, marker = copy_of(saved, tmp_path), tmp_path / "MARKER"
    shard = plant_entry(dump / "checkpoint" / "step-2", key, marker)
    stderr = resume_refused(dump, marker)
    assert f"{shard}: its entry {key!r} asks for posix.system" in stderr
    assert "could run code" in stderr and "damaged" not in stderr


def test_an_index_naming_a_file_outside_its_folder_is_refused(saved, tmp_path):
    dump, marker = copy_of(saved, tmp_path), tmp_path / "MARKER"
    path = dump / "checkpoint" / "step-2" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    index = next(iter(metadata.storage_data))
    info = metadata.storage_data[index]
    metadata.storage_data[index] = dataclasses.replace(info, relative_path="../step-1/x.distcp")
    path.write_bytes(pickle.dumps(metadata))
    stderr = resume_refused(dump, marker)
    assert "names the data file '../step-1/x.distcp'" in stderr


def test_a_good_checkpoint_resumes(saved, tmp_path):
    dump = copy_of(saved, tmp_path)
    run = titan_train([*ARGS, "--training.steps", "3"], dump_folder=dump, legacy=False).check()
    assert f"loaded checkpoint from {dump}/checkpoint/step-2" in run.stderr
    assert [m["step"] for m in run.metrics if "loss" in m] == [1, 2, 3]


# The same refusals in one process, on the checkpoint tests' tiny run.


def _tiny_checkpoint(tmp_path: Path) -> Path:
    run = tiny_run(str(tmp_path), interval=1)
    run.train()
    run.manager.save(1)
    return tmp_path / "checkpoint" / "step-1"


@pytest.mark.parametrize("how", ["os.system", "exec", "eval"])
def test_the_tiny_run_refuses_a_planted_index(tmp_path, how):
    step, marker = _tiny_checkpoint(tmp_path), tmp_path / "MARKER"
    metadata = pickle.loads((step / ".metadata").read_bytes())
    metadata.planner_data = touch(marker, how)
    (step / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(UnsafeCheckpoint, match=r"step-1/\.metadata asks for .*could run code"):
        tiny_run(str(tmp_path)).manager.load()
    assert not marker.exists()


@pytest.mark.parametrize("key", ["dataloader.dp_rank_0", "train_state.step"])
def test_the_tiny_run_refuses_a_planted_entry(tmp_path, key):
    step, marker = _tiny_checkpoint(tmp_path), tmp_path / "MARKER"
    plant_entry(step, key, marker)
    with pytest.raises(UnsafeCheckpoint, match=f"its entry '{key}' asks for posix.system"):
        tiny_run(str(tmp_path)).manager.load()
    assert not marker.exists()


def test_the_tiny_run_still_loads_its_checkpoint_and_names_a_missing_entry(tmp_path):
    step = _tiny_checkpoint(tmp_path)
    assert tiny_run(str(tmp_path)).manager.load()
    metadata = pickle.loads((step / ".metadata").read_bytes())
    del metadata.state_dict_metadata["optimizer.state.inp.weight.exp_avg"]
    (step / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(
        CheckpointError, match="holds no entry .optimizer.state.inp.weight.exp_avg."
    ) as error:
        tiny_run(str(tmp_path)).manager.load()
    assert "damaged" not in str(error.value)
