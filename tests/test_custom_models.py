"""A model family titan does not ship migrates to the user's own ``model_registry`` when the
project declares it (``[tool.titan] model-registries``) or ``--model-registry`` names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.config_objects import RegistryCall, UnsupportedModel
from titan.migrate.targets.live import instantiate

BAMBA = '''\
"""A fork's own model family: every flavor is llama3's debug model, renamed."""

import dataclasses

from titan.models.llama3 import model_registry as _llama3

CALLS = []


def model_registry(flavor: str):
    CALLS.append(flavor)
    return _llama3("debugmodel")
'''


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A project (its own git root) with a package ``forkpkg.models.bamba``."""
    (tmp_path / ".git").mkdir()
    package = tmp_path / "forkpkg" / "models"
    package.mkdir(parents=True)
    (tmp_path / "forkpkg" / "__init__.py").write_text("", encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "bamba.py").write_text(BAMBA, encoding="utf-8")
    (tmp_path / "bamba.toml").write_text(
        '[model]\nname = "bamba"\nflavor = "9B"\n[training]\nsteps = 5\n', encoding="utf-8"
    )
    (tmp_path / "llama.toml").write_text(
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\nsteps = 7\n',
        encoding="utf-8",
    )
    return tmp_path


def run(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", f"titan.cli.{tool}", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def test_without_a_declaration_the_model_is_recorded_by_name(fork):
    plan = build_plan(fork / "bamba.toml")
    assert isinstance(plan.root.fields["model_spec"], UnsupportedModel)
    assert any(
        "unsupported_model" in t or "choose a model_registry" in t for t in plan.todos["model_spec"]
    )


def test_the_command_line_names_the_package(fork):
    plan = build_plan(
        fork / "bamba.toml", model_registries={"bamba": "forkpkg.models.bamba"}, era="v0.2.2"
    )
    spec = plan.root.fields["model_spec"]
    assert spec == RegistryCall("bamba", "9B", module="forkpkg.models.bamba")
    assert plan.lossless()
    assert not [d for d in plan.diagnostics if d.code == "unknown-model"]
    (note,) = [d for d in plan.diagnostics if d.code == "custom-model"]
    assert "--model-registry" in note.message and note.hint


def test_the_project_declaration_names_the_package_and_the_command_line_wins(fork):
    (fork / "pyproject.toml").write_text(
        '[tool.titan.model-registries]\nbamba = "forkpkg.models.other"\n', encoding="utf-8"
    )
    declared = build_plan(fork / "bamba.toml").root.fields["model_spec"]
    assert declared.module == "forkpkg.models.other"
    given = build_plan(fork / "bamba.toml", model_registries={"bamba": "forkpkg.models.bamba"})
    assert given.root.fields["model_spec"].module == "forkpkg.models.bamba"


def test_a_flavor_titan_does_not_ship_goes_to_the_declared_registry(fork):
    (fork / "odd.toml").write_text(
        '[model]\nname = "llama3"\nflavor = "my_70B"\n', encoding="utf-8"
    )
    plain = build_plan(fork / "odd.toml").root.fields["model_spec"]
    assert isinstance(plain, UnsupportedModel)
    plan = build_plan(fork / "odd.toml", model_registries={"llama3": "forkpkg.models.bamba"})
    assert plan.root.fields["model_spec"] == RegistryCall(
        "llama3", "my_70B", module="forkpkg.models.bamba"
    )
    known = build_plan(fork / "llama.toml", model_registries={"llama3": "forkpkg.models.bamba"})
    assert known.root.fields["model_spec"] == RegistryCall("llama3", "debugmodel")  # titan's own


def test_the_live_config_calls_the_users_registry(fork, monkeypatch):
    monkeypatch.syspath_prepend(str(fork))
    plan = build_plan(fork / "bamba.toml", model_registries={"bamba": "forkpkg.models.bamba"})
    config = instantiate(plan)
    import forkpkg.models.bamba as bamba

    assert bamba.CALLS == ["9B"]
    assert config.model_spec.name == "llama3" and config.training.steps == 5
    for name in [m for m in sys.modules if m.startswith("forkpkg")]:
        del sys.modules[name]


def test_the_generated_module_imports_the_users_registry_and_validates(fork):
    done = run(
        "migrate",
        "bamba.toml",
        "llama.toml",
        "--model-registry",
        "bamba=forkpkg.models.bamba",
        "-o",
        "config_registry.py",
        cwd=fork,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    code = (fork / "config_registry.py").read_text(encoding="utf-8")
    assert "from forkpkg.models import bamba" in code  # two families: each through its package
    assert 'bamba.model_registry("9B")' in code and 'llama3.model_registry("debugmodel")' in code
    assert "--model-registry bamba=forkpkg.models.bamba" in code  # the Regenerate line
    check = run("validate", "config_registry.py", "--no-cache", cwd=fork)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_malformed_flag_is_a_usage_error(fork):
    for bad in ("bamba", "bamba=", "bad name=x.y", "bamba=forkpkg..bamba", "bamba=1pkg"):
        done = run("migrate", "bamba.toml", "--model-registry", bad, cwd=fork)
        assert done.returncode == 2, bad
        assert "expected NAME=package.module" in done.stderr
