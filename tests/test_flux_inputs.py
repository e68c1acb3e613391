"""Flux inputs that would be silently wrong: a dataset folder's links to files outside it are
skipped and named (their text would reach the validation pictures' prompt field), and the
generate command refuses to draw with random weights when no checkpoint is loaded."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_flux_data import loader, write_pairs
from tests.test_flux_train import TINY
from tests.training_runs import REPO, child_env

SECRET = "a line of a file outside the dataset"


def prompts_of(folder: Path, tmp_path: Path) -> tuple[list[str], object]:
    """Every caption the loader reads from the plain folder ``folder``, and the loader."""
    data = loader(tmp_path / "generated", dataset="cc12m-wds", dataset_path=str(folder),
                  infinite=False, img_size=8)  # fmt: skip
    return [p for inputs, _ in data for p in inputs["prompt"]], data


@pytest.mark.parametrize("linked", ["txt", "png"])
def test_a_link_to_a_file_outside_the_dataset_is_skipped_and_named(tmp_path, caplog, linked):
    data_folder = tmp_path / "data"
    captions = write_pairs(data_folder, 3)
    outside = tmp_path / "outside"
    write_pairs(outside, 1)
    (outside / "000.txt").write_text(SECRET, encoding="utf-8")
    link = data_folder / f"001.{linked}"
    link.unlink()
    link.symlink_to(outside / f"000.{linked}")
    with caplog.at_level(logging.WARNING, logger="titan.models.flux.flux_datasets"):
        prompts, data = prompts_of(data_folder, tmp_path)
    assert prompts == [captions[0], captions[2]]
    assert data.skipped == {"outside_folder": 1}
    assert f"{link} is a link to {outside / f'000.{linked}'}, outside the dataset" in caplog.text
    assert SECRET not in caplog.text


def test_a_folder_reached_through_a_link_is_checked_too(tmp_path):
    data_folder = tmp_path / "data"
    write_pairs(data_folder / "own", 2)
    outside = tmp_path / "outside"
    write_pairs(outside, 2)
    (data_folder / "borrowed").symlink_to(outside, target_is_directory=True)
    prompts, data = prompts_of(data_folder, tmp_path)
    assert prompts == ["sample number 0", "sample number 1"]
    assert not data.skipped  # a linked folder inside is not walked into


def test_links_inside_the_dataset_and_a_linked_dataset_folder_are_read(tmp_path):
    real = tmp_path / "real"
    captions = write_pairs(real, 3)
    (real / "002.txt").unlink()
    (real / "002.txt").symlink_to(real / "000.txt")
    given = tmp_path / "given"
    given.symlink_to(real, target_is_directory=True)
    prompts, data = prompts_of(given, tmp_path)
    assert prompts == [captions[0], captions[1], captions[0]] and not data.skipped


def generate(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """``python -m titan.models.flux.generate`` on a tiny Flux registry, one prompt."""
    registry = tmp_path / "config_registry.py"
    registry.write_text(TINY, encoding="utf-8")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red cube\n", encoding="utf-8")
    args = ["--registry", str(registry), "--config", "tiny", "--dump_folder", str(tmp_path / "d")]
    args += ["--inference.prompts_path", str(prompts), "--inference.img_size", "32", *flags]
    return subprocess.run(
        [sys.executable, "-m", "titan.models.flux.generate", *args],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_generate_without_checkpointing_refuses_to_draw_random_weights(tmp_path):
    done = generate(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "checkpoint.enable is false" in done.stderr and "--checkpoint.enable" in done.stderr
    assert "random weights" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "d" / "inference_results").exists()


@pytest.mark.slow
def test_generate_with_an_empty_checkpoint_folder_names_it_and_draws_nothing(tmp_path):
    done = generate(tmp_path, "--checkpoint.enable", "--validation.denoising_steps", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"no checkpoint in {tmp_path / 'd' / 'checkpoint'}" in done.stderr
    assert "--checkpoint.initial_load_path" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "d" / "inference_results").exists()
