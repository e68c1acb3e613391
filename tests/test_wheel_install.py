"""titan installed from a wheel, with no checkout anywhere near, trains its debug config.

The debug configs name the tokenizer and the ``c4_test`` documents as ``./tests/assets/...``;
a wheel carries them as ``titan/assets``. The wheel is built from the repository's files, put
into a fresh virtual environment (its dependencies come from this one's site-packages, added as
a plain path: nothing of the checkout's editable install comes with them), and run in an empty
folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.reference import REPO

pytestmark = pytest.mark.slow

# Small enough to train in seconds on a CPU; the tokenizer and documents are the shipped ones.
SMALL = ["--training.seq_len", "64", "--training.local_batch_size", "2"]
SMALL += ["--training.mixed_precision_param", "float32", "--validator.no-enable"]


def _copy_repository(target: Path) -> None:
    """The files git tracks or would track, as a user's download of the repository holds them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh environment with titan installed from a wheel of this repository: its bin/."""
    root = tmp_path_factory.mktemp("wheel")
    source, wheels, env = root / "source", root / "wheels", root / "env"
    _copy_repository(source)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--disable-pip-version-check", str(source), "-w", str(wheels)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("titan-*.whl")
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "titan-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps"]
        + ["--no-index", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
    )
    return env / "bin"


def _clean_env() -> dict[str, str]:
    """This environment without anything that points Python at the checkout."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def test_titan_comes_from_the_wheel_with_its_assets(installed, tmp_path):
    probe = "import titan, titan.components.local_paths as p; print(titan.__file__); "
    probe += "print(p.existing_path('./tests/assets/tokenizer'))"
    done = subprocess.run(
        [installed / "python", "-c", probe],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    module, tokenizer = done.stdout.split()
    assert Path(module).is_relative_to(installed.parent) and not Path(module).is_relative_to(REPO)
    assert Path(tokenizer) == Path(module).parent / "assets" / "tokenizer"
    assert (Path(tokenizer) / "tokenizer.json").is_file()


def test_the_debug_config_trains_two_steps_in_an_empty_folder(installed, tmp_path):
    done = subprocess.run(
        [installed / "titan-train", "--config", "llama3_debugmodel", "--training.steps", "2"]
        + SMALL,
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = (tmp_path / "outputs" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1, 2]
