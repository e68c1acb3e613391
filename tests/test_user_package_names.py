"""A user's own package may be called ``schemas`` or ``migrate``: titan's folders of those names
install as ``titan.schemas`` and ``titan.migrate``, so titan claims neither import name and the
user's registry is validated and trained from the user's package, not titan's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.training_runs import DEBUG_TOML, SEED, SMALL, migrated, titan_train

JOBS = '''\
"""The project's jobs, built on the migrated debug config of the same package."""

from __future__ import annotations

from titan.trainer import Trainer

from {package} import STEPS
from {package}.config_registry import llama3_debugmodel


def tiny_job() -> Trainer.Config:
    config = llama3_debugmodel()
    config.training.steps = STEPS
    return config
'''


def _project(tmp_path: Path, package: str) -> Path:
    """``tmp_path/proj/PACKAGE``: the migrated debug registry and a job that imports both the
    package's own ``STEPS`` and that registry by the package's name."""
    folder = tmp_path / "proj" / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""The user\'s package."""\n\nSTEPS = 2\n')
    migrated(DEBUG_TOML, folder, function="llama3_debugmodel")
    (folder / "jobs.py").write_text(JOBS.format(package=package), encoding="utf-8")
    return folder.parent


def test_titan_claims_no_generic_top_level_import_name(tmp_path: Path) -> None:
    code = (
        "import importlib.util, titan.cli.validate, titan.migrate.plan, titan.schemas.legacy\n"
        "print([n for n in ('schemas', 'migrate') if importlib.util.find_spec(n) is not None])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("package", ["schemas", "migrate"])
def test_a_registry_in_a_user_package_named_like_a_titan_folder_validates(
    tmp_path: Path, package: str
) -> None:
    project = _project(tmp_path, package)
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "--config", "tiny_job"]
        + ["--module", f"{package}.jobs"],
        capture_output=True,
        text=True,
        cwd=project,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the value the finding names comes from the user's package, not from titan's folder
    (project / package / "__init__.py").write_text("STEPS = -3\n", encoding="utf-8")
    registry = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "--as-registry", f"{package}/jobs.py"],
        capture_output=True,
        text=True,
        cwd=project,
    )
    assert registry.returncode == 1, registry.stdout + registry.stderr
    assert "`training.steps` is -3; it must be ≥ 1" in registry.stdout, registry.stdout


@pytest.mark.slow  # a real training run
def test_a_registry_in_a_user_package_named_schemas_trains(tmp_path: Path) -> None:
    project = _project(tmp_path, "schemas")
    run = titan_train(
        ["--module", "schemas.jobs", "--config", "tiny_job", *SMALL, *SEED],
        dump_folder=tmp_path / "out",
        legacy=False,
        cwd=project,
    ).check()
    # STEPS came from the user's schemas package: two steps, each with a finite loss
    assert len(run.losses) == 2, run.stdout
    assert all(loss == loss for loss in run.losses)
