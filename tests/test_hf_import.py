"""Hugging Face weight import refuses folders it would load wrongly or block on: non-floating
tensors for floating parameters, a tensor in two shards, an index naming missing or outside
files, shards that are FIFOs, folders or dangling links; and an initial load that checkpointing
being off would silently skip is said loudly, in titan-validate and in titan-train."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.tiny_checkpoint_run import RenamingAdapter, tiny_run
from tests.training_runs import REPO, SMALL, run_module, run_train
from titan.components.checkpoint import CheckpointError


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A tiny run's last save in Hugging Face format (one ``model.safetensors``)."""
    run = tiny_run(str(tmp_path / "a"), sd_adapter=RenamingAdapter(), last_save_in_hf=True)
    run.manager.save(1, last_step=True)
    return tmp_path / "a" / "checkpoint" / "step-1"


def load(folder: Path, tmp_path: Path) -> bool:
    """Start a new tiny run from the Hugging Face weights in ``folder``."""
    run = tiny_run(
        str(tmp_path / "b"),
        sd_adapter=RenamingAdapter(),
        initial_load_path=str(folder),
        initial_load_in_hf=True,
    )
    return run.manager.load()


@pytest.mark.parametrize(
    ("key", "dtype"),
    [("hf.out.weight", torch.int32), ("hf.inp.bias", torch.bool), ("hf.inp.weight", torch.int64)],
)
def test_a_non_floating_tensor_for_a_floating_parameter_is_refused(export, tmp_path, key, dtype):
    weights = export / "model.safetensors"
    tensors = load_file(weights)
    tensors[key] = tensors[key].to(dtype)
    save_file(tensors, weights)
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(CheckpointError, match=rf"'{key}' \({name}\) in {weights}.*not a floating"):
        load(export, tmp_path)


def test_float16_weights_still_load(export, tmp_path):
    weights = export / "model.safetensors"
    save_file({k: v.half() for k, v in load_file(weights).items()}, weights)
    assert load(export, tmp_path)


def test_a_tensor_in_two_shards_is_refused_naming_both(export, tmp_path):
    first = export / "model.safetensors"
    second = export / "zz-extra.safetensors"
    tensors = load_file(first)
    save_file({"hf.out.bias": tensors["hf.out.bias"] + 1}, second)
    with pytest.raises(CheckpointError, match=rf"'hf.out.bias' is in both {first} and {second}"):
        load(export, tmp_path)


@pytest.mark.parametrize(
    ("shard", "says"),
    [
        ("model-00002-of-00002.safetensors", "which is not in"),
        ("../model.safetensors", "not a file of its own folder"),
        ("/etc/passwd", "not a file of its own folder"),
    ],
)
def test_an_index_naming_a_missing_or_outside_shard_is_refused(export, tmp_path, shard, says):
    index = export / "model.safetensors.index.json"
    weight_map = {"hf.inp.weight": "model.safetensors", "hf.out.weight": shard}
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(CheckpointError, match=f"{index} maps 'hf.out.weight'.*{says}"):
        load(export, tmp_path)


def test_missing_keys_and_other_shapes_are_refused(export, tmp_path):
    weights = export / "model.safetensors"
    tensors = load_file(weights)
    save_file({k: v for k, v in tensors.items() if k != "hf.out.bias"}, weights)
    with pytest.raises(CheckpointError, match=r"1 of its 4 tensors are missing.*out.bias"):
        load(export, tmp_path)
    save_file({**tensors, "hf.out.bias": torch.zeros(5)}, weights)
    with pytest.raises(CheckpointError, match=r"another shape.*out.bias: saved \[5\], model \[4\]"):
        load(export, tmp_path)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "gone.safetensors")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_fifo, "is a named pipe"),
        (_folder, "is a folder, not a safetensors file"),
        (_dangling, "is a link to a file that does not exist"),
    ],
    ids=["fifo", "folder", "dangling-link"],
)
def test_a_shard_that_is_not_a_regular_file_is_refused_without_opening_it(
    export, tmp_path, make, says
):
    odd = export / "model-extra.safetensors"
    make(odd)
    with pytest.raises(CheckpointError, match=f"{odd} {says}"):
        load(export, tmp_path)


def test_a_link_to_a_regular_shard_loads(export, tmp_path):
    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.move(export / "model.safetensors", tmp_path / "blob")
    (linked / "model.safetensors").symlink_to(tmp_path / "blob")
    assert load(linked, tmp_path)


HF_RUN = ["--config", "llama3_debugmodel", "--training.steps", "1", *SMALL]


@pytest.mark.slow
def test_titan_train_refuses_a_fifo_shard_instead_of_blocking(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    os.mkfifo(folder / "model.safetensors")
    args = [*HF_RUN, "--checkpoint.enable", "--checkpoint.initial_load_in_hf"]
    args += ["--checkpoint.initial_load_path", str(folder), "--dump_folder", str(tmp_path / "d")]
    done = run_train(args)
    assert done.returncode != 0
    assert f"{folder / 'model.safetensors'} is a named pipe" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_titan_train_says_an_initial_load_without_checkpointing_is_not_loaded(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()  # empty: with checkpointing on this is an error (above); off, it is not read
    args = [*HF_RUN, "--checkpoint.initial_load_in_hf"]
    args += ["--checkpoint.initial_load_path", str(folder), "--dump_folder", str(tmp_path / "d")]
    done = run_train(args)
    out = done.stdout + done.stderr
    assert "warning[initial-load-disabled]" in out and "are NOT loaded" in out
    assert "--checkpoint.enable" in out
    enabled = run_train([*args, "--checkpoint.enable"])
    assert enabled.returncode != 0
    assert f"{folder} holds no *.safetensors files" in enabled.stderr


@pytest.mark.parametrize(
    ("lines", "blamed"),
    [
        ('initial_load_path = "/somewhere"', "initial checkpoint in `/somewhere`"),
        ('initial_load_path = "/w"\ninitial_load_in_hf = true', "Hugging Face weights in `/w`"),
        ("initial_load_in_hf = true", "Hugging Face weights in hf_assets_path"),
    ],
)
def test_titan_validate_warns_of_an_initial_load_with_checkpointing_off(tmp_path, lines, blamed):
    toml = (REPO / "legacy_configs" / "llama3" / "debug_model.toml").read_text()
    assert "[checkpoint]\nenable = false\n" in toml
    path = tmp_path / "run.toml"
    path.write_text(toml.replace("[checkpoint]\n", f"[checkpoint]\n{lines}\n"))
    done = run_module([str(path)], module="titan.cli.validate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"warning[initial-load-disabled] the {blamed} are NOT loaded" in done.stdout
    path.write_text(
        toml.replace("[checkpoint]\nenable = false\n", f"[checkpoint]\nenable = true\n{lines}\n")
    )
    assert (
        "initial-load-disabled" not in run_module([str(path)], module="titan.cli.validate").stdout
    )
