"""A run built from Python (``config.build()``, the library path) says the config's warning
findings -- those ``titan-train`` prints before it starts: a setting with no effect -- through
the ``titan`` logger, each once, on rank 0; a run ``titan-train`` starts has printed them beside
the config's lines already and does not say them again."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from tests.training_runs import REPO, SEED, SMALL, child_env
from titan.models.llama3.config_registry import llama3_debugmodel

# A setting that has no effect on a one-process run, and the code of its warning.
NO_EFFECT = {
    "async-tp": ("enable_async_tensor_parallel", True),  # without tensor parallel
    "no-effect": ("context_parallel_rotate_method", "alltoall"),  # titan gathers keys, values
}


def _config(tmp_path):
    config = llama3_debugmodel()
    config.training.steps = 1
    config.training.seq_len = 64
    config.training.local_batch_size = 2
    config.dump_folder = str(tmp_path / "run")
    for setting, value in NO_EFFECT.values():
        setattr(config.parallelism, setting, value)
    return config


def _said(caplog) -> list[str]:
    """The warning findings the ``titan`` logger said, by code."""
    return [
        record.getMessage().partition("]")[0].lstrip("[")
        for record in caplog.records
        if record.name == "titan"
        and record.levelno == logging.WARNING
        and record.getMessage().startswith("[")
    ]


@pytest.mark.parametrize("reported", [False, True], ids=["library", "titan-train"])
def test_a_library_run_says_each_warning_once(tmp_path, caplog, monkeypatch, reported):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = _config(tmp_path)
    with caplog.at_level(logging.INFO, logger="titan"):
        trainer = config.build(**({"findings_reported": True} if reported else {}))
        trainer.close()
    said = _said(caplog)
    if reported:
        assert said == []
        return
    assert sorted(said) == sorted(NO_EFFECT), caplog.text
    text = {r.getMessage() for r in caplog.records if r.name == "titan"}
    assert any(
        m.startswith("[async-tp] parallelism.enable_async_tensor_parallel: ") and "; hint: " in m
        for m in text
    ), text


@pytest.mark.parametrize(("rank", "says"), [("0", True), ("1", False), ("3", False)])
def test_only_rank_0_says_them(tmp_path, caplog, monkeypatch, rank, says):
    from titan.training.run_checks import refuse_findings

    monkeypatch.setenv("RANK", rank)
    with caplog.at_level(logging.INFO, logger="titan"):
        refuse_findings(_config(tmp_path), world_size=1, warn_findings=True)
    assert sorted(_said(caplog)) == (sorted(NO_EFFECT) if says else [])


@pytest.mark.slow  # a titan-train process that imports torch and trains a step
def test_titan_train_prints_each_warning_once(tmp_path):
    args = ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "1"]
    args += ["--dump_folder", str(tmp_path / "run")]
    args += ["--parallelism.enable_async_tensor_parallel"]
    args += ["--parallelism.context_parallel_rotate_method", "alltoall"]
    done = subprocess.run(
        [sys.executable, "-m", "titan.train", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(PYTHONPATH=str(REPO)),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # beside the command line's flags, then not again from the run's logger
    assert done.stderr.count("warning[async-tp]") == 1, done.stderr
    assert done.stderr.count("warning[no-effect]") == 1, done.stderr
    assert "[async-tp] parallelism." not in done.stderr, done.stderr
