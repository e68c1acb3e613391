"""The hooks in ``.pre-commit-hooks.yaml`` work as a consumer repository uses them.

A real ``pre-commit run`` in throwaway git repositories: this repository's files are committed
into a temporary hook repository, and a consumer repository's ``.pre-commit-config.yaml`` points
at it by commit sha, as it would at a release tag. pre-commit builds the hooks' environment itself
(``pip install .`` into a fresh virtualenv, with ``requirements.txt`` as the constraints so it gets
the pinned versions): titan's base dependencies only, no torch, so the registry hook also shows
that checking a registry config needs no torch.

The environment is installed once per module (the slow part); each run after it reuses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.reference import REPO

pytestmark = pytest.mark.slow

TIMEOUT_S = 600
"""Per subprocess: the environment install downloads titan's base dependencies."""

HOOK_REPO_FILES = ("pyproject.toml", "setup.py", "README.md", ".pre-commit-hooks.yaml")
HOOK_REPO_DIRS = ("schemas", "migrate", "titan", "tests/assets")
"""What ``pip install .`` of this repository needs (the wheel ships ``tests/assets`` as
``titan.assets``), as pre-commit's clone of the hook repository has it."""

REGISTRY_HOOK = "titan-validate-registry"
TOML_HOOK = "titan-validate"

PRE_COMMIT_CONFIG = """\
repos:
  - repo: {repo}
    rev: {rev}
    hooks:
      - id: titan-validate-registry
      - id: titan-validate
"""

REGISTRY_SOURCE = """\
from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer


def my_run() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("debugmodel"),
        training=TrainingConfig({steps}=3, local_batch_size=4),
    )
"""

JOB_TOML = """\
[model]
name = "llama3"
flavor = "debugmodel"

[training]
local_batch_size = 4
seq_len = 512
steps = 3
"""


def git_env(home: Path) -> dict[str, str]:
    """The caller's environment without its git and pre-commit settings, plus an identity.

    No global or system git config is read (so a user's hooks, signing or templates cannot
    interfere), and pre-commit's and titan's caches are under ``home``, never the user's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GIT_", "PRE_COMMIT"))
    }
    env |= {
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "titan test",
        "GIT_AUTHOR_EMAIL": "titan-test@example.invalid",
        "GIT_COMMITTER_NAME": "titan test",
        "GIT_COMMITTER_EMAIL": "titan-test@example.invalid",
        "PRE_COMMIT_HOME": str(home / "pre-commit"),
        # titan-validate's registry cache, never the user's.
        "TITAN_CACHE_DIR": str(home / "titan"),
        # pre-commit's `pip install .` of the hook repository takes the pinned versions.
        "PIP_CONSTRAINT": str(REPO / "requirements.txt"),
        "NO_COLOR": "1",
    }
    return env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def output_of(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def git(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = run(["git", *args], cwd, env)
    assert result.returncode == 0, f"git {' '.join(args)}\n{output_of(result)}"
    return result.stdout.strip()


def hook_names() -> dict[str, str]:
    """Hook id -> the name pre-commit prints for it, from the manifest."""
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    return {hook["id"]: hook["name"] for hook in hooks}


def status_line(output: str, name: str) -> str:
    """pre-commit's ``<name>.....Passed`` line for one hook."""
    lines = [line for line in output.splitlines() if line.startswith(name + ".")]
    assert len(lines) == 1, f"no single status line for {name!r} in\n{output}"
    return lines[0]


@dataclass
class Consumer:
    path: Path
    env: dict[str, str]
    cache: Path
    install_s: float

    def pre_commit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-m", "pre_commit", *args], self.path, self.env)

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path


@pytest.fixture(scope="module")
def consumer(tmp_path_factory) -> Consumer:
    if shutil.which("git") is None:
        reason = "git is not installed: pre-commit needs it"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + " (under CI=true this must not skip)")
        pytest.skip(reason)
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        pytest.fail("pre-commit is not installed: pip install -r requirements.txt")

    root = tmp_path_factory.mktemp("precommit")
    env = git_env(root / "cache")

    hooks = root / "titan-hooks"
    hooks.mkdir()
    for name in HOOK_REPO_FILES:
        shutil.copy2(REPO / name, hooks / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", "*.egg-info")
    for name in HOOK_REPO_DIRS:
        shutil.copytree(REPO / name, hooks / name, ignore=ignore)
    git(["init", "-q", "-b", "main"], hooks, env)
    git(["add", "-A"], hooks, env)
    git(["commit", "-q", "--no-gpg-sign", "-m", "titan hooks under test"], hooks, env)
    sha = git(["rev-parse", "HEAD"], hooks, env)

    project = root / "project"
    project.mkdir()
    git(["init", "-q", "-b", "main"], project, env)
    (project / ".pre-commit-config.yaml").write_text(
        PRE_COMMIT_CONFIG.format(repo=hooks, rev=sha), encoding="utf-8"
    )
    (project / "config_registry.py").write_text(
        REGISTRY_SOURCE.format(steps="steps"), encoding="utf-8"
    )
    (project / "job.toml").write_text(JOB_TOML, encoding="utf-8")
    git(["add", "-A"], project, env)
    git(["commit", "-q", "--no-gpg-sign", "-m", "consumer"], project, env)

    consumer = Consumer(project, env, root / "cache" / "pre-commit", install_s=0.0)
    start = time.perf_counter()
    installed = consumer.pre_commit("install-hooks")
    consumer.install_s = time.perf_counter() - start
    assert installed.returncode == 0, f"pre-commit install-hooks\n{output_of(installed)}"
    print(f"\npre-commit hook environment installed in {consumer.install_s:.1f} s")
    return consumer


def timed_run(consumer: Consumer, *files: str) -> subprocess.CompletedProcess[str]:
    start = time.perf_counter()
    result = consumer.pre_commit("run", "--color", "never", "--files", *files)
    print(f"pre-commit run --files {' '.join(files)}: {time.perf_counter() - start:.1f} s")
    return result


def test_hook_environment_has_no_torch(consumer):
    """titan installs with its base dependencies only: the hooks check configs without torch."""
    pythons = sorted(consumer.cache.glob("repo*/py_env-*/bin/python"))
    assert len(pythons) == 1, f"expected one hook environment in {consumer.cache}: {pythons}"
    probe = run(
        [
            str(pythons[0]),
            "-c",
            "import importlib.util as u; print(u.find_spec('torch') is None, u.find_spec('titan') is not None)",
        ],
        consumer.path,
        consumer.env,
    )
    assert probe.stdout.split() == ["True", "True"], output_of(probe)


def test_toml_hook_flags_a_typo_then_passes(consumer):
    names = hook_names()
    job = consumer.write("job.toml", JOB_TOML.replace("steps = 3", "stpes = 3"))
    line = JOB_TOML.splitlines().index("steps = 3") + 1
    try:
        failed = timed_run(consumer, "job.toml")
        out = output_of(failed)
        assert failed.returncode == 1, out
        assert f"job.toml:{line}:1:" in failed.stdout, out
        assert "unknown-key" in failed.stdout and "did you mean" in failed.stdout, out
        assert status_line(failed.stdout, names[TOML_HOOK]).endswith("Failed"), out
        assert job.read_text(encoding="utf-8") == JOB_TOML.replace("steps = 3", "stpes = 3")
    finally:
        consumer.write("job.toml", JOB_TOML)

    passed = timed_run(consumer, "job.toml")
    assert passed.returncode == 0, output_of(passed)
    assert status_line(passed.stdout, names[TOML_HOOK]).endswith("Passed"), output_of(passed)


def test_registry_hook_flags_a_typo_then_passes(consumer):
    names = hook_names()
    typo = REGISTRY_SOURCE.format(steps="stpes")
    registry = consumer.write("config_registry.py", typo)
    (typo_line,) = [n for n, text in enumerate(typo.splitlines(), 1) if "stpes" in text]
    column = typo.splitlines()[typo_line - 1].index("stpes") + 1
    try:
        failed = timed_run(consumer, "config_registry.py", "job.toml")
        out = output_of(failed)
        assert failed.returncode == 1, out
        assert f"config_registry.py:{typo_line}:{column}:" in failed.stdout, out
        assert "unknown-key" in failed.stdout and "did you mean" in failed.stdout, out
        assert status_line(failed.stdout, names[REGISTRY_HOOK]).endswith("Failed"), out
        # Each hook sees only its own files: the valid TOML passes beside the broken registry.
        assert status_line(failed.stdout, names[TOML_HOOK]).endswith("Passed"), out
        # A check never rewrites what it checks.
        assert registry.read_text(encoding="utf-8") == typo
        assert (consumer.path / "job.toml").read_text(encoding="utf-8") == JOB_TOML
    finally:
        consumer.write("config_registry.py", REGISTRY_SOURCE.format(steps="steps"))

    passed = timed_run(consumer, "config_registry.py", "job.toml")
    out = output_of(passed)
    assert passed.returncode == 0, out
    assert status_line(passed.stdout, names[REGISTRY_HOOK]).endswith("Passed"), out
    assert status_line(passed.stdout, names[TOML_HOOK]).endswith("Passed"), out


UPSTREAM_SOURCE = """\
from torchtitan.config import TrainingConfig
from torchtitan.models.llama3 import model_registry
from torchtitan.trainer import Trainer


def my_upstream_run() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("8B"),
        training=TrainingConfig({steps}=3, local_batch_size=4),
    )
"""


def test_registry_hook_flags_a_typo_in_an_upstream_module(consumer):
    """A repository of modules written for upstream torchtitan 0.3.0: the same hook reads them
    statically (its environment has neither torch nor torchtitan) and fails on the typo."""
    names = hook_names()
    typo = UPSTREAM_SOURCE.format(steps="stpes")
    consumer.write("upstream/config_registry.py", typo)
    (typo_line,) = [n for n, text in enumerate(typo.splitlines(), 1) if "stpes" in text]
    column = typo.splitlines()[typo_line - 1].index("stpes") + 1
    try:
        failed = timed_run(consumer, "upstream/config_registry.py")
        out = output_of(failed)
        assert failed.returncode == 1, out
        assert f"config_registry.py:{typo_line}:{column}:" in failed.stdout, out
        assert "upstream-field" in failed.stdout and "did you mean `steps`" in failed.stdout, out
        assert status_line(failed.stdout, names[REGISTRY_HOOK]).endswith("Failed"), out
    finally:
        consumer.write("upstream/config_registry.py", UPSTREAM_SOURCE.format(steps="steps"))
    passed = timed_run(consumer, "upstream/config_registry.py")
    assert passed.returncode == 0, output_of(passed)
