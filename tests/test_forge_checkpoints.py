"""Where a migrated Forge app keeps its checkpoints: Forge's engine read ``checkpoint.folder`` from
the working folder (it never joined it to ``job.dump_folder``), so the migrated config names the
same folder seen from ``dump_folder``, and a resumed run finds what Forge saved."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import yaml
from titan.migrate.legacy_config import trainer_config

from tests.helpers import write
from tests.training_runs import DEBUG_TOML, REPO, SMALL, run_train

FORGE = REPO / "tests" / "data" / "forge"


def migrate(path: Path) -> tuple[dict, str]:
    """``titan-migrate --format json PATH``: the report of the file, and the module."""
    from titan.cli import migrate as cli

    out, err = io.StringIO(), io.StringIO()
    assert cli.run(["--format", "json", str(path)], stdout=out, stderr=err) == 0, err.getvalue()
    (report,) = json.loads(err.getvalue())["files"]
    return report, out.getvalue()


def app(tmp_path: Path, checkpoint: dict, *, job: dict | None = None, name="app.yaml") -> Path:
    """An RL app whose trainer block has ``checkpoint`` (and ``job``)."""
    trainer = {"model": {"name": "llama3", "flavor": "debugmodel"}, "checkpoint": checkpoint}
    if job is not None:
        trainer["job"] = job
    return write(tmp_path, name, yaml.safe_dump({"trainer": trainer, "services": {}}))


@pytest.mark.parametrize(
    ("checkpoint", "job", "folder"),
    [
        # the app's torchtitan (0.2.0, which Forge pinned) put outputs in ./torchtitan/outputs
        ({"enable": True, "folder": "./checkpoint"}, None, "../../checkpoint"),
        ({"enable": True}, None, "../../checkpoint"),  # the default, from the working folder
        ({"enable": True, "folder": "runs/ckpt"}, None, "../../runs/ckpt"),
        ({"enable": True}, {"dump_folder": "out/exp1"}, "../../checkpoint"),
        ({"enable": True, "folder": "ckpt"}, {"dump_folder": "."}, "ckpt"),
    ],
)
def test_forge_checkpoint_folder_is_carried_from_the_working_folder(
    tmp_path, checkpoint, job, folder
):
    path = app(tmp_path, checkpoint, job=job)
    report, module = migrate(path)
    config = trainer_config(path)
    assert config.checkpoint.folder == folder
    # titan joins it to dump_folder: the same folder Forge's engine used.
    forge = os.path.normpath(checkpoint.get("folder", "checkpoint"))
    assert os.path.normpath(os.path.join(config.dump_folder, config.checkpoint.folder)) == forge
    assert report["lossless"], report["todos"]
    notes = [d for d in report["diagnostics"] if d["code"] == "forge-app"]
    if folder != checkpoint.get("folder"):
        (note,) = notes
        assert note["severity"] == "info" and "working folder" in note["message"]
        assert f"folder={folder!r}".replace("'", '"') in module


def test_forge_checkpoint_folder_is_said_in_the_report_text(tmp_path):
    from titan.cli import migrate as cli

    out, err = io.StringIO(), io.StringIO()
    cli.run([str(FORGE / "grpo_qwen3.yaml")], stdout=out, stderr=err)
    assert "info[forge-app] Forge's engine kept the checkpoints in 'checkpoint'" in err.getvalue()
    assert "# where Forge kept them: 'checkpoint' under the working folder" in out.getvalue()


@pytest.mark.parametrize(
    "checkpoint",
    [
        {"enable": True, "folder": "/mnt/ckpt/run1"},  # absolute: the same place in both
        {"enable": False, "folder": "./checkpoint"},  # no checkpoints to find
    ],
)
def test_forge_checkpoint_folder_that_needs_nothing_is_left_as_written(tmp_path, checkpoint):
    path = app(tmp_path, checkpoint)
    report, _ = migrate(path)
    assert trainer_config(path).checkpoint.folder == checkpoint["folder"]
    assert not [d for d in report["diagnostics"] if d["code"] == "forge-app"]


def test_forge_checkpoint_folder_an_absolute_dump_folder_cannot_reach_is_a_todo(tmp_path):
    path = app(tmp_path, {"enable": True, "folder": "ckpt"}, job={"dump_folder": "/scratch/out"})
    report, module = migrate(path)
    assert not report["lossless"]
    assert any("absolute path" in text for text in report["todos"]["checkpoint.folder"])
    assert "TODO(titan-migrate): Forge kept the checkpoints in 'ckpt'" in module


def test_toml_checkpoint_folder_stays_under_the_dump_folder(tmp_path):
    toml = write(tmp_path, "job.toml", '[checkpoint]\nenable = true\nfolder = "./checkpoint"\n')
    assert trainer_config(toml).checkpoint.folder == "./checkpoint"


@pytest.mark.slow
def test_migrated_forge_run_resumes_from_forges_checkpoint(tmp_path):
    """A run of the app saves where Forge's engine saved (``./checkpoint`` of the working
    folder), and a second run with one more step resumes from it."""
    import tomllib

    with open(DEBUG_TOML, "rb") as f:
        sections = tomllib.load(f)
    sections["model"]["hf_assets_path"] = str(REPO / "tests" / "assets" / "tokenizer")
    sections["checkpoint"].update(enable=True, folder="./checkpoint", interval=1)
    sections.pop("job")
    path = write(tmp_path, "app.yaml", yaml.safe_dump({"trainer": sections}))
    flags = ["--job.config_file", str(path), *SMALL, "--debug.seed", "7"]
    first = run_train([*flags, "--training.steps", "1"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-4000:]
    assert (tmp_path / "checkpoint" / "step-1").is_dir()
    assert not (tmp_path / "outputs" / "checkpoint").exists()
    second = run_train([*flags, "--training.steps", "2"], cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "from step 2 to 2" in second.stderr + second.stdout
