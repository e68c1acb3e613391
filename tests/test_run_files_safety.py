"""The files titan-train writes into its folders are never followed through a link, never opened
as a FIFO that would block, never written over a folder; a full disk during a save is named as
such and the last good checkpoint survives it.

The refusals are real ``titan-train`` runs (both config forms, one process and torchrun) whose
dump folder already holds, under a name the run writes, a symlink (to a file outside the folder,
or to nothing), a FIFO or a folder; each must exit 1 with a message naming the path and what it
is, leave the folder and the link's target byte for byte as they were, and end on its own (a FIFO
opened with ``O_NONBLOCK`` fails at once; the subprocess timeout is only a safety net).

A full disk is made for real on a small tmpfs where mounting is allowed, and otherwise simulated
in-process by DCP's and safetensors' writers raising what they raise on a full disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest
import torch

from tests.run_checks import REGISTRY, checkpointed, no_traceback
from tests.tiny_checkpoint_run import RenamingAdapter, tiny_run
from tests.training_runs import DEBUG_TOML, SMALL, Launch, titan_train, titan_trains
from titan.components import run_files
from titan.components.checkpoint import CheckpointError
from titan.components.metric_sinks import JsonlSink
from titan.components.run_files import UnsafeRunFile, open_run_file, replace_run_file
from titan.training.errors import describe

PRECIOUS = b"precious: not titan's\n"
LEGACY = ["--job.config_file", str(DEBUG_TOML), *SMALL]
STEPS = ["--training.steps", "1"]


def listing(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` without following links or opening FIFOs: a file's content
    hash, a link's target, or its kind."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            found[str(path.relative_to(folder))] = f"link -> {os.readlink(path)}"
        elif stat.S_ISREG(info.st_mode):
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path.relative_to(folder))] = stat.filemode(info.st_mode)[0]
    return found


@contextlib.contextmanager
def never_blocks(seconds: int = 120):
    """Safety net for an in-process open that could block: fail instead of hanging the suite.
    What the tests assert is the outcome of the open, never how long it took."""

    def blocked(*_):
        """SIGALRM: the open did not return."""
        raise AssertionError("the open blocked")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# What a name can be made into, and how the refusal says it.


def make_symlink(path: Path, base: Path) -> str:
    """``path`` -> a file outside the folder holding ``PRECIOUS``."""
    outside = base / "outside.txt"
    outside.write_bytes(PRECIOUS)
    path.symlink_to(outside)
    return f"a symlink to {outside}"


def make_dangling(path: Path, base: Path) -> str:
    """``path`` -> a name that does not exist (opening through it would create it)."""
    path.symlink_to(base / "missing.txt")
    return f"a symlink to {base / 'missing.txt'}, which does not exist"


def make_fifo(path: Path, base: Path) -> str:
    """``path`` as a FIFO with no reader (a blocking open for writing would wait forever)."""
    os.mkfifo(path)
    return "a FIFO (named pipe)"


def make_folder(path: Path, base: Path) -> str:
    """``path`` as a folder holding a file of the user's."""
    path.mkdir()
    (path / "kept.txt").write_bytes(PRECIOUS)
    return "a folder"


MAKERS = {
    "symlink": make_symlink,
    "dangling": make_dangling,
    "fifo": make_fifo,
    "folder": make_folder,
}


@dataclasses.dataclass(frozen=True)
class Case:
    """A run whose ``name`` (in the dump folder, or in ``folder``) was made into ``made``."""

    name: str
    made: str
    args: tuple[str, ...] = (*REGISTRY, *STEPS)
    legacy: bool = False
    folder: str = "run"
    """The folder the name is in, under the case's base: the dump folder ``run``, or another."""

    @property
    def id(self) -> str:
        """The test id: folder/name-made-form."""
        return f"{self.folder}/{self.name}-{self.made}-{'toml' if self.legacy else 'registry'}"


CHECKPOINT_ELSEWHERE = ("--checkpoint.enable", "--checkpoint.folder")
CASES = [
    Case("titan-train.lock", "symlink"),
    Case("titan-train.lock", "symlink", args=(*LEGACY, *STEPS), legacy=True),
    Case("titan-train.lock", "dangling"),
    Case("titan-train.lock", "fifo"),
    Case("titan-train.lock", "folder", args=(*LEGACY, *STEPS), legacy=True),
    Case("metrics.jsonl", "symlink", args=(*LEGACY, *STEPS), legacy=True),
    Case("metrics.jsonl", "dangling"),
    Case("metrics.jsonl", "fifo"),
    Case(
        "config.json",
        "symlink",
        args=(*REGISTRY, *STEPS, "--debug.save_config_file", "config.json"),
    ),
    Case(
        "config.json",
        "fifo",
        args=(*LEGACY, *STEPS, "--job.save_config_file", "config.json"),
        legacy=True,
    ),
    # The lock of a checkpoint folder outside the dump folder (its path is added per case).
    Case(
        "titan-train.lock",
        "symlink",
        args=(*REGISTRY, *STEPS, *CHECKPOINT_ELSEWHERE),
        folder="ckpt",
    ),
]


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Every case's run, launched at once (each is refused before it builds anything): the case
    id -> (run, its base folder, the kind the message names, the listing before the run)."""
    prepared, launches = {}, []
    for case in CASES:
        base = tmp_path_factory.mktemp("case")
        dump = base / "run"
        dump.mkdir()
        (base / case.folder).mkdir(exist_ok=True)
        kind = MAKERS[case.made](base / case.folder / case.name, base)
        args = list(case.args)
        if case.folder != "run":
            args.append(str(base / case.folder))
        prepared[case.id] = (base, kind, listing(base))
        launches.append(Launch(args, dump_folder=dump, legacy=case.legacy))
    runs = titan_trains(launches, timeout=600)  # a safety net: a blocked open never returns
    return {case.id: (run, *prepared[case.id]) for case, run in zip(CASES, runs, strict=True)}


@pytest.mark.slow  # eleven runs at once: about 35 s of CPU
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_a_name_the_run_writes_that_is_not_a_file_is_refused_untouched(refused, case):
    run, base, kind, before = refused[case.id]
    path = base / case.folder / case.name
    assert run.returncode == 1, run.stderr[-3000:]
    no_traceback(run.stderr)
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith(f"titan-train: error: {path} is {kind}, not a file titan-train"), (
        message
    )
    assert f"Delete {path}, or choose another dump folder (--dump_folder, or --job.dump_folder" in (
        message
    )
    # Nothing written or removed anywhere under the case's folder: the link, its target, the
    # FIFO and the folder are as they were, and no lock, metrics or checkpoint is left.
    assert listing(base) == before
    if case.made == "symlink":
        assert (base / "outside.txt").read_bytes() == PRECIOUS
    if case.made == "dangling":
        assert not (base / "missing.txt").exists()


@pytest.mark.slow
def test_every_torchrun_rank_stops_when_rank_0_refuses_a_linked_lock(tmp_path):
    dump = tmp_path / "run"
    dump.mkdir()
    kind = make_symlink(dump / "titan-train.lock", tmp_path)
    before = listing(tmp_path)
    run = titan_train([*REGISTRY, *STEPS], dump_folder=dump, legacy=False, nproc=2, timeout=600)
    assert run.returncode == 1, run.stderr[-3000:]  # torchrun's summary has its own traceback
    path = dump / "titan-train.lock"
    assert f"titan-train rank 0: error: {path} is {kind}" in run.stderr
    assert f"titan-train rank 1: error: rank 0 refused the run: {path} is {kind}" in run.stderr
    assert listing(tmp_path) == before


def test_the_run_checks_its_metrics_and_saved_config_before_any_work(tmp_path):
    from types import SimpleNamespace

    from titan.training.dump_lock import check_run_files, run_files

    config = SimpleNamespace(
        dump_folder=str(tmp_path), debug=SimpleNamespace(save_config_file="saved/config.json")
    )
    assert run_files(config) == [f"{tmp_path}/metrics.jsonl", f"{tmp_path}/saved/config.json"]
    check_run_files(config)  # nothing there yet: nothing to refuse
    (tmp_path / "saved").mkdir()
    kind = make_fifo(tmp_path / "saved" / "config.json", tmp_path)
    with pytest.raises(UnsafeRunFile) as refused_run:
        check_run_files(config)
    assert str(refused_run.value).startswith(f"{tmp_path}/saved/config.json is {kind}, not a")


# The opens themselves, not only the check before the run: a name made into a link or a FIFO
# after that check is refused by the open.

OPENS = {
    "lock": os.O_RDWR | os.O_CREAT,
    "metrics": os.O_RDWR | os.O_APPEND | os.O_CREAT,
    "traceback": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "export json": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
}


@pytest.mark.parametrize("made", sorted(MAKERS))
@pytest.mark.parametrize("opened", sorted(OPENS))
def test_the_open_refuses_what_is_not_a_regular_file(tmp_path, made, opened):
    path = tmp_path / "name"
    kind = MAKERS[made](path, tmp_path)
    before = listing(tmp_path)
    with never_blocks(), pytest.raises(UnsafeRunFile) as refused_open:
        os.close(open_run_file(str(path), OPENS[opened]))
    assert str(refused_open.value).startswith(f"{path} is {kind}, not a file titan-train wrote")
    assert listing(tmp_path) == before


def test_a_regular_file_is_opened_blocking_and_appended_to(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"old\n")
    fd = open_run_file(str(path), OPENS["metrics"])
    try:
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
        os.write(fd, b"new\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"old\nnew\n"


def test_an_atomic_write_replaces_a_link_made_after_its_check_never_its_target(
    tmp_path, monkeypatch
):
    outside = tmp_path / "outside.txt"
    outside.write_bytes(PRECIOUS)
    saved = tmp_path / "config.json"
    saved.symlink_to(outside)
    with pytest.raises(UnsafeRunFile, match="is a symlink to"):
        replace_run_file(str(saved), data=b"{}\n")
    assert saved.is_symlink() and outside.read_bytes() == PRECIOUS
    # The link appears between the check and the rename: the rename replaces the link itself.
    monkeypatch.setattr(run_files, "check_run_file", lambda path: None)
    replace_run_file(str(saved), data=b"{}\n")
    assert not saved.is_symlink() and saved.read_bytes() == b"{}\n"
    assert outside.read_bytes() == PRECIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "outside.txt"]


def test_metrics_on_a_full_disk_name_the_file_and_say_the_disk_is_full(tmp_path, monkeypatch):
    import titan.components.metric_sinks as sinks

    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    # /dev/full answers every write with ENOSPC, as a full disk does.
    monkeypatch.setattr(
        sinks, "open_run_file", lambda _path, _flags: os.open("/dev/full", os.O_RDWR)
    )
    with pytest.raises(OSError) as full:
        sink.write({"step": 1, "loss": 1.0})
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(path)
    assert describe(full.value).startswith(
        f"the disk is full writing {path} (No space left on device); free space on that disk, "
        "or choose a dump folder on another one"
    )
    sink.write({"step": 2})  # after a failed write the sink stays closed, it does not raise again
    sink.close()


# A full disk during a checkpoint save: said as such, and the last good checkpoint survives.

TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
FULL_DISK_ERRORS = {
    "ENOSPC": lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    "torch's writer": lambda: RuntimeError(TORCH_FULL),
}


def failing_writes(monkeypatch, error) -> None:
    """DCP's file writer writes a little of each file, then fails with ``error()``."""
    import torch.distributed.checkpoint.filesystem as filesystem

    def write_item(transforms, stream, *args, **kwargs):
        """DCP's ``_write_item`` on a disk that fills up part way."""
        stream.write(b"partial")
        raise error()

    monkeypatch.setattr(filesystem, "_write_item", write_item)


def saved_twice(tmp_path: Path, **checkpoint):
    """A tiny run with complete checkpoints of steps 1 and 2, and their files' hashes."""
    run = tiny_run(str(tmp_path), interval=1, keep_latest_k=2, **checkpoint)
    for step in (1, 2):
        run.train()
        run.manager.save(step)
    run.manager.writer.wait()
    return run, listing(tmp_path / "checkpoint")


def assert_step_2_loads(tmp_path: Path, params: dict) -> None:
    """A fresh tiny run resumes from step 2 with exactly ``params``."""
    resumed = tiny_run(str(tmp_path), interval=1, keep_latest_k=2)
    assert resumed.manager.load() is True
    assert resumed.train_state.value == 2
    for key, value in params.items():
        assert torch.equal(resumed.params()[key], value), key


@pytest.mark.parametrize("mode", ["disabled", "async"])
@pytest.mark.parametrize("raised", sorted(FULL_DISK_ERRORS))
def test_a_full_disk_during_a_save_is_named_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch, mode, raised
):
    run, before = saved_twice(tmp_path, async_mode=mode)
    params = run.params()
    root = tmp_path / "checkpoint"
    monkeypatch.setattr(run_files, "free_bytes", lambda folder: 0)  # the disk is now full
    failing_writes(monkeypatch, FULL_DISK_ERRORS[raised])
    run.train()
    with pytest.raises(CheckpointError) as failed:
        run.manager.save(3)
        run.manager.writer.wait()  # a background save reports when it is waited for
    action = "saving step 3" if mode == "disabled" else "the background save of step 3"
    said = {
        "ENOSPC": "the disk is full (No space left on device)",
        "torch's writer": f"the disk is full (0 bytes left; torch's writer said: {TORCH_FULL})",
    }[raised]
    assert str(failed.value) == (
        f"{action} failed: {said}, writing {root}/step-3.tmp. The last good checkpoint, "
        f"{root}/step-2, is intact, and a new run with this dump folder resumes from it. Free "
        "space on that disk (the incomplete step-3.tmp is removed when the next run starts), "
        "keep fewer checkpoints (checkpoint.keep_latest_k) or put them on another disk "
        "(checkpoint.folder)"
    )
    # keep_latest_k = 2 purged nothing for the failed save: steps 1 and 2 are as they were.
    after = listing(root)
    assert {k: v for k, v in after.items() if not k.startswith("step-3.tmp")} == before
    monkeypatch.undo()
    assert_step_2_loads(tmp_path, params)


def test_a_torch_write_failure_with_room_left_says_the_disk_may_be_full(tmp_path, monkeypatch):
    run, _ = saved_twice(tmp_path)
    monkeypatch.setattr(run_files, "free_bytes", lambda folder: 5 * 1024**3)
    failing_writes(monkeypatch, FULL_DISK_ERRORS["torch's writer"])
    with pytest.raises(CheckpointError) as failed:
        run.manager.save(3)
    assert str(failed.value).startswith(
        f"saving step 3 failed: torch could not finish writing a file ({TORCH_FULL}), "
        "5,368,709,120 bytes are left: the disk may be full, over its quota or failing, writing "
    )


def test_a_save_failing_for_another_reason_is_not_called_a_full_disk(tmp_path, monkeypatch):
    run, _ = saved_twice(tmp_path)
    failing_writes(monkeypatch, lambda: RuntimeError("the storage went away"))
    with pytest.raises(CheckpointError) as failed:
        run.manager.save(3)
    assert str(failed.value) == "saving step 3 failed: RuntimeError: the storage went away"


def test_a_full_disk_during_a_hugging_face_export_is_named(tmp_path, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    run, before = saved_twice(
        tmp_path, sd_adapter=RenamingAdapter(), last_save_in_hf=True, last_save_model_only=True
    )

    def full(*args, **kwargs):
        """``safetensors.torch.save_file`` on a full disk (its own words)."""
        message = "Error while serializing: I/O error: No space left on device (os error 28)"
        raise SafetensorError(message)

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(CheckpointError) as failed:
        run.manager.save(3, last_step=True)
    assert str(failed.value).startswith(
        "saving step 3 failed: the disk is full (No space left on device), writing "
        f"{tmp_path}/checkpoint/step-3.tmp. The last good checkpoint, "
        f"{tmp_path}/checkpoint/step-2, is intact"
    )
    after = listing(tmp_path / "checkpoint")
    assert {k: v for k, v in after.items() if not k.startswith("step-3.tmp")} == before


# A real full disk: a 100 MiB tmpfs holds one checkpoint of the debug model (75 MB), not two.


@pytest.fixture
def small_disk(tmp_path):
    """A 100 MiB tmpfs at ``tmp_path/disk`` (skips where this process may not mount one)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=100m", "tmpfs", str(disk)]
    try:
        done = subprocess.run(mount, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"cannot mount a tmpfs here: {error}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, timeout=60)


def test_a_saved_config_on_a_full_disk_keeps_the_old_file_and_names_the_new_one(small_disk):
    saved = small_disk / "config.json"
    saved.write_bytes(b"{}\n")
    with pytest.raises(OSError) as full:
        replace_run_file(str(saved), data=b"x" * (101 * 1024**2))
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(saved)
    assert describe(full.value).startswith(f"the disk is full writing {saved} (No space left")
    assert listing(small_disk) == {"config.json": hashlib.sha256(b"{}\n").hexdigest()}


@pytest.mark.slow
def test_a_run_on_a_full_disk_says_so_and_its_last_checkpoint_still_loads(small_disk):
    dump = small_disk / "run"
    titan_train([*REGISTRY, *checkpointed(1, interval=1)], dump_folder=dump, legacy=False).check()
    step_1 = listing(dump / "checkpoint" / "step-1")
    # Resumed from step 1 (so step 1 loads), then step 2's save finds no room.
    run = titan_train([*REGISTRY, *checkpointed(2, interval=1)], dump_folder=dump, legacy=False)
    assert f"loaded checkpoint from {dump}/checkpoint/step-1 in" in run.stderr
    assert run.returncode == 1, run.stderr[-3000:]
    no_traceback(run.stderr)
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("titan-train: error: saving step 2 failed: the disk is full ("), (
        message
    )
    assert f"writing {dump}/checkpoint/step-2.tmp. The last good checkpoint, " in message
    assert f"{dump}/checkpoint/step-1, is intact" in message
    assert listing(dump / "checkpoint" / "step-1") == step_1
    # And the next run does resume from it: it frees the incomplete save and loads step 1.
    again = titan_train([*REGISTRY, *checkpointed(1, interval=1)], dump_folder=dump, legacy=False)
    again.check()
    assert f"removed {dump}/checkpoint/step-2.tmp" in again.stderr
    assert f"loaded checkpoint from {dump}/checkpoint/step-1 in" in again.stderr
