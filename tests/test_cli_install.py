"""Every titan command as installed: ``--version`` prints ``<command> <version>`` and exits 0, and
``titan-train`` in a Python without torch names the install instead of calling it a bug."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from titan import __version__

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
DEBUG = ROOT / "legacy_configs" / "llama3" / "debug_model.toml"


def command(name: str, *args: str, env: dict | None = None, cwd: Path = ROOT):
    """Run the console script ``name`` as pip installs it: its entry point's ``main``."""
    module, _, function = SCRIPTS[name].partition(":")
    code = (
        f"import sys; sys.argv[0] = {name!r}; from {module} import {function} as m; sys.exit(m())"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=300,
    )


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_command_prints_its_version(name):
    result = command(name, "--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{name} {__version__}\n", "")


def hidden_torch(tmp_path: Path) -> dict:
    """An environment whose ``torch`` cannot be imported, as in an install without the extra."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}


@pytest.mark.parametrize(
    "args",
    [
        ["--job.config_file", str(DEBUG), "--training.steps", "1"],
        ["--config", "llama3_debugmodel", "--training.steps", "1"],
        ["--preflight", "--job.config_file", str(DEBUG)],
    ],
    ids=["legacy", "registry", "preflight"],
)
def test_train_without_torch_names_the_install(tmp_path, args):
    result = command("titan-train", *args, env=hidden_torch(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert "pip install 'titan[train]'" in result.stderr
    assert "bug in titan" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "outputs").exists()  # no crash traceback saved either


def test_validate_and_migrate_run_without_torch(tmp_path):
    env = hidden_torch(tmp_path)
    assert command("titan-validate", str(DEBUG), env=env).returncode == 0
    assert command("titan-migrate", str(DEBUG), env=env).returncode == 0
