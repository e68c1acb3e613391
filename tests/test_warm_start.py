"""The suite's warm starts (``tests.warm_start``) run ``titan-train`` as a fresh interpreter does:
the same exit status, the same output, the same losses to the bit and the same files, for runs
that train, resume, refuse a config or a command line, or end on a signal; torchrun's ranks
started warm train and fail as cold ones, and a worker killed takes its rank with it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import warm_start
from tests.training_runs import (
    DEBUG_TOML,
    REPO,
    SEED,
    SMALL,
    Launch,
    child_env,
    loss_bits,
    run_train,
    signal_when,
    start,
    titan_trains,
    torchrun,
    wait_until,
)

pytestmark = pytest.mark.slow  # every case starts titan-train twice

REGISTRY = """
from titan.models.llama3.config_registry import llama3_debugmodel


def mine():
    config = llama3_debugmodel()
    config.model_spec.model.n_layers = 1
    return config
"""

TIMES = (
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "HH:MM:SS"),
    (re.compile(r"\b(tps|tflops|memory|mfu):(\s*)[\d.,]+"), r"\1:\2N"),
    (re.compile(r"\bin \d+(\.\d+)? ?(s|ms)\b"), "in N s"),
)


def same_output(text: str, folder: Path) -> str:
    """``text`` with the run's folder and what varies by the clock replaced."""
    text = text.replace(str(folder), "<folder>")
    for pattern, replacement in TIMES:
        text = pattern.sub(replacement, text)
    return text


def cold(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "titan.train", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(),
        cwd=cwd,
    )


def files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def losses(folder: Path) -> list[str]:
    path = folder / "run" / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return loss_bits([record["loss"] for record in map(json.loads, lines) if "loss" in record])


def prepare_registry(folder: Path) -> list[str]:
    (folder / "config_registry.py").write_text(REGISTRY, encoding="utf-8")
    return []


def prepare_checkpoint(folder: Path) -> list[str]:
    """A checkpoint at step 2 that the case's run resumes from."""
    first = cold(
        ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "2"]
        + ["--checkpoint.enable", "--dump_folder", str(folder / "run")],
        folder,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    return []


CASES = {
    "legacy TOML": (
        lambda folder: [],
        ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, "--training.steps", "3"]
        + ["--job.dump_folder", "run"],
    ),
    "registry module by relative path": (
        prepare_registry,
        ["--registry", "config_registry.py", "--config", "mine", *SMALL, *SEED]
        + ["--training.steps", "2", "--dump_folder", "run"],
    ),
    "resumed from a checkpoint": (
        prepare_checkpoint,
        ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "4"]
        + ["--checkpoint.enable", "--dump_folder", "run"],
    ),
    "a config refused": (
        lambda folder: [],
        ["--config", "llama3_debugmodel", "--training.local_batch_size", "0"]
        + ["--dump_folder", "run"],
    ),
    "a malformed command line": (lambda folder: [], ["--config"]),
    "pre-flight": (
        lambda folder: [],
        ["--preflight", "--ngpu", "8", "--job.config_file", str(DEBUG_TOML)],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_warm_run_prints_writes_and_trains_as_a_cold_one(case, tmp_path):
    prepare, args = CASES[case]
    results = {}
    for how in ("cold", "warm"):
        folder = tmp_path / how
        folder.mkdir()
        prepare(folder)
        before = files(folder)
        done = cold(args, folder) if how == "cold" else run_train(args, cwd=folder)
        results[how] = (
            done.returncode,
            same_output(done.stdout, folder),
            same_output(done.stderr, folder),
            losses(folder),
            before,
            files(folder),
        )
    assert warm_start.server() is not None, "the run was not started warm"
    assert results["warm"] == results["cold"]
    code, _, stderr, trained, _, _ = results["cold"]
    assert "Traceback" not in stderr
    assert code != 0 or trained or "--preflight" in args  # the cases that train did train


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [
        (signal.SIGTERM, 143, "terminated by SIGTERM after step"),
        (signal.SIGINT, 130, "interrupted by SIGINT after step"),
        (signal.SIGKILL, -9, ""),
    ],
)
def test_a_warm_run_takes_signals_as_a_new_process(sig, code, said, tmp_path):
    """The run's own handlers stop it after a step on SIGTERM and SIGINT (not the server's), and
    an uncaught signal is reported as ``subprocess`` reports it."""
    assert warm_start.server() is not None
    metrics = tmp_path / "run" / "metrics.jsonl"
    args = ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "100000"]
    args += ["--dump_folder", str(tmp_path / "run")]
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = start(args, stdout=stdout, stderr=stderr)
        try:
            signal_when(process, lambda: metrics.exists() and '"loss"' in metrics.read_text(), sig)
            assert process.wait(timeout=600) == code
        finally:
            process.kill()
        stderr.seek(0)
        text = stderr.read()
    assert said in text, text[-3000:]
    assert "Traceback" not in text


def test_cold_runs_are_asked_for_by_the_environment(monkeypatch):
    monkeypatch.setenv("TITAN_TEST_COLD", "1")
    assert warm_start.server() is None


@pytest.mark.parametrize(
    ("change", "warm"),
    [
        ({"OMP_NUM_THREADS": "2"}, False),
        ({"PYTHONHASHSEED": "1"}, False),
        ({"TORCH_LOGS": "dynamo"}, False),
        ({"TITAN_DEBUG": "1"}, True),
        ({"TORCHELASTIC_RUN_ID": "x"}, True),
    ],
)
def test_a_run_whose_start_up_environment_differs_starts_cold(change, warm, tmp_path):
    server = warm_start.server()
    assert server is not None
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        run = server.start(
            ["--help"], cwd=tmp_path, env={**child_env(), **change}, stdout=stdout, stderr=stderr
        )
        assert (run is not None) == warm
        if run is not None:
            assert run.wait(timeout=600) == 0


def test_the_server_imported_without_threads_or_output():
    """What forking relies on: one thread in the server, and nothing printed by its imports
    (``WarmServer`` refuses to serve otherwise)."""
    server = warm_start.server()
    assert server is not None and server.process.poll() is None
    threads = os.listdir(f"/proc/{server.process.pid}/task")
    assert len(threads) == 1, threads


def rank_lines(text: str, folder: Path) -> list[str]:
    """titan's own lines of a torchrun launch's output, normalised (torchrun's are its own)."""
    return [line for line in same_output(text, folder).splitlines() if line.startswith("[titan")]


@pytest.mark.parametrize(
    "extra",
    [["--training.steps", "3"], ["--training.local_batch_size", "0"]],
    ids=["trains", "refused on every rank"],
)
def test_torchrun_ranks_started_warm_end_as_cold_ranks_do(extra, tmp_path, monkeypatch):
    args = ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, *extra]
    results = {}
    for how in ("cold", "warm"):
        if how == "cold":
            monkeypatch.setenv("TITAN_TEST_COLD", "1")
        else:
            monkeypatch.delenv("TITAN_TEST_COLD")
        folder = tmp_path / how
        (run,) = titan_trains([Launch(args, dump_folder=folder, legacy=True, nproc=2)])
        results[how] = (
            run.returncode,
            same_output(run.stdout, folder),
            sorted(rank_lines(run.stderr, folder)),
            loss_bits(run.losses),
        )
    assert results["warm"] == results["cold"]
    assert results["cold"][0] == (0 if extra[0] == "--training.steps" else 1)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that are still there (zombies included)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_a_killed_worker_takes_its_warm_rank_with_it(tmp_path):
    """torchrun sees the worker die of SIGKILL and stops the other; no rank is left running."""
    server = warm_start.server()
    assert server is not None
    folder = tmp_path / "run"
    launch = Launch(
        ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "100000"],
        dump_folder=folder,
        nproc=2,
    )
    args, env = torchrun(launch.torchrun_args(), child_env())
    command = [sys.executable, "-m", "torch.distributed.run", *args]  # an agent of its own
    metrics = folder / "metrics.jsonl"
    with tempfile.TemporaryFile("w+") as output:
        agent = subprocess.Popen(command, stdout=output, stderr=output, env=env, cwd=REPO)
        try:
            wait_until(
                lambda: (
                    agent.poll() is not None
                    or (metrics.exists() and '"loss"' in metrics.read_text())
                )
            )
            workers = children(agent.pid)
            assert len(workers) == 2, workers
            os.kill(workers[1], signal.SIGKILL)
            assert agent.wait(timeout=600) != 0
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    # The server reaps its runs as it hears of their end: wait for that, not for a time.
    wait_until(lambda: children(server.process.pid) == [], timeout=600)
