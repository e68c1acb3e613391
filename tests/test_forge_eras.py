"""A TorchForge app is dated by its shape to the torchtitan Forge pinned when it was written
(``titan.schemas.forge_eras.forge_era``), not taken for an undated v0.2.2 file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.schemas.forge_eras import CLUES, PINS, forge_era
from titan.schemas.yaml_source import parse

ROOT = Path(__file__).resolve().parents[1]
FORGE = ROOT / "tests" / "data" / "forge"


def era_of(text: str) -> tuple[str, str] | None:
    """The era of an app config's text, as the reader hands the whole app over."""
    return forge_era(parse(text, file="app.yaml").app)


@pytest.mark.parametrize(
    ("fixture", "day", "pinned", "window"),
    [
        # 2025-10-22 on: torchtitan 0.2.0 (assets/versions.sh, then pyproject.toml)
        ("sft_qwen3.yaml", "2025-10-17", "0.2.0", "2025-10-22 to 2025-11-15"),
        ("grpo_qwen3.yaml", "2025-10-17", "0.2.0", "2025-10-10 to 2025-11-15"),
        # the SFT recipe's metric logger, datasets and validation loop: to 2025-10-13
        ("sft_alpaca_2025_09.yaml", "2025-10-02", "0cfbd0b3", "2025-08-27 to 2025-10-13"),
        # the Hugging Face trainer actor with its service block: 2025-09-15 to 2025-09-16
        ("grpo_hf_2025_09.yaml", "2025-08-30", "298bf482", "2025-09-15 to 2025-09-16"),
        # apps/rl's processes block: 2025-08-27 to 2025-09-08
        ("rl_llama3_2025_08.yaml", "2025-08-30", "298bf482", "2025-08-29 to 2025-09-08"),
        # no `launcher: mast`: the pin of every other launch
        ("mast_qwen3.yaml", "2025-10-17", "0.2.0", "2025-10-10 to 2025-11-15"),
    ],
)
def test_forge_fixtures_are_dated_by_their_shape(fixture, day, pinned, window):
    found = era_of((FORGE / fixture).read_text())
    assert found is not None
    assert found[0] == day
    assert f"torchtitan {pinned}" in found[1] or f"main at {pinned}" in found[1], found[1]
    assert window in found[1], found[1]


def test_sft_app_of_july_2025_ran_on_a_nightly():
    found = era_of(
        "model: {name: llama3, flavor: 8B, tokenizer_path: /tmp/llama3}\n"
        "training: {steps: 10, compile: false, dataset: c4}\n"
        "checkpoint: {enable_checkpoint: true, folder: /tmp/llama3/ckpt}\n"
    )
    assert found == (found[0], found[1]) and found[0] == "2025-08-27"
    assert "nightly" in found[1] and "unpinned" in found[1]


def test_mast_launch_keeps_its_own_commit():
    text = textwrap.dedent(
        """\
        launcher: mast
        job_name: forge-qwen3
        services: {policy: {procs: 1, num_replicas: 1, mesh_name: policy}}
        actors: {trainer: {procs: 8, with_gpus: true, mesh_name: trainer}}
        provisioner: {launcher: mast}
        trainer: {model: {name: qwen3, flavor: 8B}}
        """
    )
    day, evidence = era_of(text)
    assert day == "2025-10-14" and "main at d0e25450" in evidence and "MAST" in evidence


def test_spawner_option_renames_narrow_the_era():
    before = "services: {policy: {procs_per_replica: 1, num_replicas: 1}}\n"
    after = "services: {policy: {procs: 1, num_replicas: 1}}\n"
    trainer = "trainer: {model: {name: qwen3, flavor: 1.7B}}\n"
    assert era_of(before + trainer)[0] == "2025-08-30"  # 2025-09-16 to 2025-09-19: 298bf482
    assert era_of(after + trainer)[0] == "2025-10-17"  # 2025-09-19 on: the newest pin


def test_shapes_that_never_met_are_dated_by_the_newest():
    day, evidence = era_of(
        "trainer:\n  service: {procs_per_replica: 1}\n  model: {name: llama3}\n"
        "provisioner: {launcher: slurm}\n"
    )
    assert "never met" in evidence and day == "2025-10-02"  # provisioner from 2025-10-06


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {},
        {"policy": {"engine_args": {"model": "x"}}, "services": {}},  # a generator-only app
        {"training": 5},
    ],
)
def test_documents_that_are_no_forge_app_have_no_era(document):
    assert forge_era(document) is None


def test_the_tables_are_ordered_and_dated():
    assert [p.since for p in PINS] == sorted(p.since for p in PINS)
    for clue in CLUES:
        assert len(clue.since) == 10 and (clue.until is None or clue.since <= clue.until), clue
    for pin in PINS:
        assert pin.day is None or pin.day <= pin.since, pin


def test_forge_eras_imports_no_torch():
    script = "import sys, titan.schemas.forge_eras; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
