"""titan's trainer runs on the torch releases it was tested on (``titan.torch_support``): an
older or newer torch is refused at start, with the range, before torch or a config is imported;
``TITAN_ANY_TORCH=1`` makes that a warning."""

from __future__ import annotations

import os
import tomllib

import pytest

from tests.helpers import module_process
from tests.training_runs import REPO, SMALL
from titan import torch_support
from titan.torch_support import NEWEST, OLDEST, UnsupportedTorch, refusal


@pytest.mark.parametrize(
    "version",
    ["2.11.0", "2.11.0a0+git1b2c3d", "2.12.1", "2.13.0+cpu", "2.14.1", "2.12.0a0+ab12cd.nv26.03"],
)
def test_the_supported_releases_and_their_local_builds_pass(version):
    assert refusal(version) is None


@pytest.mark.parametrize(
    ("version", "side"),
    [
        ("2.10.0", "older"),
        ("2.6.0+cu124", "older"),
        ("1.13.1", "older"),
        ("2.15.0", "newer"),
        ("2.16.0.dev20261201+cpu", "newer"),
        ("3.0.0", "newer"),
    ],
)
def test_releases_outside_the_range_are_refused_with_it(version, side):
    why = refusal(version)
    assert why == (
        f"titan's trainer runs on torch 2.11 to 2.14; this Python has torch {version}, "
        f"which is {side}"
    )


@pytest.mark.parametrize("version", ["", "main", "v2.13.0", "2"])
def test_an_unreadable_version_is_refused_by_name(version):
    assert refusal(version) == (
        f"titan cannot read the version of the installed torch ({version!r})"
    )


def test_the_train_extra_asks_for_the_same_range():
    with (REPO / "pyproject.toml").open("rb") as handle:
        extra = tomllib.load(handle)["project"]["optional-dependencies"]["train"]
    assert f"torch>={OLDEST[0]}.{OLDEST[1]},<{NEWEST[0]}.{NEWEST[1] + 1}" in extra


def test_the_torch_of_this_environment_is_supported():
    assert refusal(torch_support.installed_version()) is None


def _fake_torch(folder, version: str) -> dict[str, str]:
    """An environment whose ``torch`` package metadata says ``version``: a dist-info folder
    ahead of site-packages (the real torch stays importable), then this checkout's packages."""
    info = folder / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n", encoding="utf-8"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(REPO)]), OMP_NUM_THREADS="1"
    )
    env.pop(torch_support.OVERRIDE, None)
    return env


@pytest.mark.parametrize("version", ["2.9.1", "2.15.0"])
def test_titan_train_refuses_before_it_reads_the_config(tmp_path, version):
    env = _fake_torch(tmp_path, version)
    # A registry module that would leave a mark if it were imported.
    registry = tmp_path / "config_registry.py"
    registry.write_text(
        "import pathlib\npathlib.Path(__file__).with_name('imported').touch()\n", encoding="utf-8"
    )
    for args in (
        ["--registry", str(registry), "--config", "anything"],
        ["--preflight", "--config", "llama3_debugmodel"],
        ["--job.config_file", str(REPO / "legacy_configs/llama3/debug_model.toml")],
    ):
        done = module_process(
            "titan.train", *args, "--dump_folder", str(tmp_path / "out"), cwd=tmp_path, env=env
        )
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        assert done.stderr.startswith(
            f"titan-train: error: titan's trainer runs on torch 2.11 to 2.14; this Python has "
            f"torch {version}"
        ), done.stderr
        assert "TITAN_ANY_TORCH=1" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "imported").exists()
    assert not (tmp_path / "out").exists()


def test_the_override_makes_it_a_warning(tmp_path):
    env = dict(_fake_torch(tmp_path, "2.15.0"), TITAN_ANY_TORCH="1")
    done = module_process(
        "titan.train", "--preflight", "--config", "llama3_debugmodel", cwd=REPO, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pre-flight passed: llama3 debugmodel")
    assert "this Python has torch 2.15.0, which is newer; going on untested" in done.stderr


@pytest.mark.slow  # trains one step
def test_a_run_with_the_override_warns_once(tmp_path):
    """titan-train checks before it reads the config and its trainer checks again when built:
    the run says it goes on untested once."""
    env = dict(_fake_torch(tmp_path, "2.15.0"), TITAN_ANY_TORCH="1")
    done = module_process(
        "titan.train",
        *["--config", "llama3_debugmodel", "--training.steps", "1", *SMALL],
        *["--dump_folder", str(tmp_path / "run")],
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("going on untested") == 1, done.stderr


def test_the_library_refuses_before_it_builds(monkeypatch, tmp_path):
    from titan.models.flux.config_registry import flux_debugmodel
    from titan.models.llama3.config_registry import llama3_debugmodel

    monkeypatch.setattr(torch_support, "installed_version", lambda: "2.10.0")
    monkeypatch.delenv(torch_support.OVERRIDE, raising=False)
    for make in (llama3_debugmodel, flux_debugmodel):
        config = make()
        config.dump_folder = str(tmp_path / make.__name__)
        with pytest.raises(UnsupportedTorch, match=r"torch 2\.11 to 2\.14; .* torch 2\.10\.0"):
            config.build()
        assert not (tmp_path / make.__name__).exists()
