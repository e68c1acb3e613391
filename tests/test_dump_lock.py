"""One run per dump folder: the lock rank 0 takes before anything is written, seen from real
``titan-train`` runs (both forms, one process and torchrun) and from processes that hold it,
die with it or fork while holding it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.run_checks import (
    REGISTRY,
    checkpointed,
    no_traceback,
    snapshot,
    step_folders,
)
from tests.training_runs import (
    DEBUG_TOML,
    REPO,
    SMALL,
    launch,
    ranks_alone,
    signal_when,
    titan_train,
)

# One dump folder, one run.


def wait_until_stopped(process: subprocess.Popen) -> None:
    """Return once the kernel reports ``process`` (a child of this one) stopped: ``waitpid``
    with ``WUNTRACED`` answers when the group stop is complete, every thread stopped."""
    pid, status = os.waitpid(process.pid, os.WUNTRACED)
    assert pid == process.pid and os.WIFSTOPPED(status), "the run ended instead of stopping"


@pytest.mark.slow
def test_a_second_run_in_a_busy_dump_folder_is_refused_and_touches_nothing(tmp_path):
    dump = tmp_path / "outputs"
    first = launch([*REGISTRY, *checkpointed(10000, interval=2), "--dump_folder", str(dump)])
    try:
        # Frozen right after its first checkpoint, so that nothing it does can change the folder
        # while the second run tries it: SIGSTOP takes effect when the kernel next schedules each
        # thread, so the folder is read once every thread is reported stopped.
        signal_when(first, (dump / "checkpoint" / "step-2").is_dir, signal.SIGSTOP)
        wait_until_stopped(first)
        before = snapshot(dump)
        assert "titan-train.lock" in before
        for args, legacy in [
            ([*REGISTRY, "--training.steps", "3", "--checkpoint.enable"], False),
            (["--job.config_file", str(DEBUG_TOML), *SMALL, "--training.steps", "3"], True),
        ]:
            second = titan_train(args, dump_folder=dump, legacy=legacy)
            assert second.returncode == 1, second.stderr[-3000:]
            no_traceback(second.stderr)
            message = second.stderr.strip().splitlines()[-1]
            assert message.startswith(f"titan-train: error: {dump} is in use by another")
            assert f"pid {first.pid} on {socket.gethostname()}" in message
            assert f"remove {dump}/titan-train.lock to run anyway" in message
            assert "released when pid" in message and "even when it is killed" in message
            assert snapshot(dump) == before
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()
    # SIGKILL left the lock file behind, but the kernel released the lock with the process: the
    # next run takes the folder over without being told to, and resumes the killed run.
    assert (dump / "titan-train.lock").exists()
    latest = max(int(n.removeprefix("step-")) for n in step_folders(dump) if "." not in n)
    resumed = titan_train(
        [*REGISTRY, *checkpointed(latest + 1, interval=2)], dump_folder=dump, legacy=False
    ).check()
    assert f"loaded checkpoint from {dump}/checkpoint/step-{latest} in" in resumed.stderr
    assert not (dump / "titan-train.lock").exists()  # released, and removed, at the end


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2], ids=["one-process", "two-ranks"])
def test_a_lock_held_elsewhere_names_its_holder_and_removing_the_file_overrides_it(tmp_path, nproc):
    from titan.training.dump_lock import FolderLock

    # This test process stands for a run that is still alive and holds the folder.
    held = FolderLock.acquire(str(tmp_path))
    try:
        args = [*REGISTRY, "--training.steps", "1"]
        if nproc == 1:
            refused = titan_train(args, dump_folder=tmp_path, legacy=False, timeout=300)
            codes, stderr = [refused.returncode], refused.stderr
        else:  # each rank's own message is read: torchrun's monitor could stop the slower one
            codes, stderr = ranks_alone([*args, "--dump_folder", str(tmp_path)], nproc=2)
        assert codes == [1] * nproc, stderr[-3000:]
        assert f"is in use by another titan-train run: pid {os.getpid()}" in stderr
        assert not (tmp_path / "metrics.jsonl").exists()
        if nproc == 2:  # every rank ends at once, rank 1 with rank 0's reason
            assert "rank 1: error: rank 0 refused the run" in stderr
        (tmp_path / "titan-train.lock").unlink()  # the documented override
        run = titan_train(args, dump_folder=tmp_path, legacy=False, nproc=nproc).check()
        assert len(run.losses) == 1
    finally:
        held.release()


# The lock on its own.


def test_the_folder_lock_names_its_holder_and_a_removed_file_is_an_override(tmp_path):
    from titan.training.dump_lock import LOCK_FILE, DumpFolderInUse, FolderLock

    path = tmp_path / LOCK_FILE
    path.write_text("left by a run that was killed\n")  # not held by anyone: simply taken
    first = FolderLock.acquire(str(tmp_path))
    holder = json.loads(path.read_text())
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(DumpFolderInUse, match=rf"pid {os.getpid()} on {socket.gethostname()}"):
        FolderLock.acquire(str(tmp_path))
    path.unlink()  # the override: a new run locks a new file
    second = FolderLock.acquire(str(tmp_path))
    first.release()  # the overridden holder ends: it must not remove the new run's file
    assert path.exists()
    with pytest.raises(DumpFolderInUse):
        FolderLock.acquire(str(tmp_path))
    second.release()
    second.release()
    assert not path.exists()
    FolderLock.acquire(str(tmp_path)).release()


def test_a_lock_outlives_its_holder_only_as_a_file(tmp_path):
    """A holder killed with SIGKILL leaves the file; the kernel has released the lock."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from titan.training.dump_lock import "
            "FolderLock; FolderLock.acquire(sys.argv[1]); print('held', flush=True); "
            "sys.stdin.read()",  # held until it is killed, however long the test takes
            str(tmp_path),
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    from titan.training.dump_lock import DumpFolderInUse, FolderLock

    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(DumpFolderInUse, match=f"pid {holder.pid} on"):
            FolderLock.acquire(str(tmp_path))
    finally:
        holder.kill()
        holder.communicate()
    assert (tmp_path / "titan-train.lock").exists()
    FolderLock.acquire(str(tmp_path)).release()


FORKING_HOLDER = """
import os, sys
from titan.training.dump_lock import FolderLock

FolderLock.acquire(sys.argv[1])
worker = os.fork()
if worker == 0:  # a data loader worker, forked while the run holds its lock
    os.close(1)  # the test reads the run's output to its end
    os.close(2)
    os.read(0, 1)  # lives until the test closes its end of this pipe (or kills it)
    os._exit(0)
print(worker, flush=True)
os._exit(0)  # the run dies without releasing anything; its worker lives on
"""


def test_a_forked_worker_that_outlives_its_run_does_not_keep_the_folder_locked(tmp_path):
    from titan.training.dump_lock import FolderLock

    alive, keep_alive = os.pipe()
    try:
        holder = subprocess.run(
            [sys.executable, "-c", FORKING_HOLDER, str(tmp_path)],
            cwd=REPO,
            stdin=alive,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(alive)
    worker = int(holder.stdout)
    try:
        os.kill(worker, 0)  # still alive
        FolderLock.acquire(str(tmp_path)).release()
    finally:
        os.kill(worker, signal.SIGKILL)
        os.close(keep_alive)
