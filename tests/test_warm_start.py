"""The suite's warm starts (``tests.warm_start``) run ``titan-train`` as a fresh interpreter does:
the same exit status, the same output, the same losses to the bit and the same files, for runs
that train, resume, refuse a config or a command line, or end on a signal."""

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
    child_env,
    loss_bits,
    run_train,
    signal_when,
    start,
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
    assert warm_start.server_for(child_env()) is not None, "the run was not started warm"
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
    assert warm_start.server_for(child_env()) is not None
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
    assert warm_start.server_for(child_env()) is None


def test_a_run_whose_start_up_environment_differs_starts_cold():
    assert warm_start.server_for(child_env()) is not None
    assert warm_start.server_for({**child_env(), "OMP_NUM_THREADS": "2"}) is None
    assert warm_start.server_for(child_env(PYTHONPATH=str(REPO))) is None
    assert warm_start.server_for(child_env(TITAN_DEBUG="1")) is not None


def test_the_server_imported_without_threads_or_output():
    """What forking relies on: one thread in the server, and nothing printed by its imports
    (``WarmServer`` refuses to serve otherwise)."""
    server = warm_start.server_for(child_env())
    assert server is not None and server.process.poll() is None
    threads = os.listdir(f"/proc/{server.process.pid}/task")
    assert len(threads) == 1, threads
