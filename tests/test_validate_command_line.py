"""titan-validate judges its whole command line before any registry code runs, refuses time
limits and memory sizes it cannot keep, and registry code never waits on titan's standard
input, in the folder mode and in ``--config NAME`` mode alike."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import validate_process

"""A safety net only: nothing here is meant to wait."""

MODULE = """\
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "imported.marker"), "w").close()
from titan.models.llama3 import model_registry
from titan.trainer import Trainer


def job() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debugmodel"))
"""
"""A registry module that leaves a marker when it is imported."""


def validate(*args: str, cwd: Path, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return validate_process(*args, cwd=cwd, cache=cwd / "cache", stdin=stdin)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "config_registry.py").write_text(MODULE)
    return tmp_path


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (["--memory-limit", "1GiB"], "--memory-limit is for checking files and folders"),
        (["--select", "job"], "--select is for checking files and folders"),
        (["--no-cache"], "--no-cache is for checking files and folders"),
        (["--fix"], "--fix is for checking files and folders"),
        (["-x"], "unrecognized option -x"),
        (["--training.steps", "5", "-q", "3"], "unrecognized option -q"),
        (["--bad!name=3"], "unrecognized option --bad!name"),
        (["---training.steps", "5"], "unrecognized option ---training.steps"),
        (["stray.toml"], "unexpected argument 'stray.toml'"),
        (["--timeout", "0"], "argument --timeout"),
        (["--timeout", "inf"], "argument --timeout"),
        (["--timeout", "1e308"], "argument --timeout"),
        (["--format", "yaml"], "argument --format"),
        (["--ngpu", "many"], "argument --ngpu"),
    ],
)
def test_a_bad_option_is_refused_before_the_registry_runs(
    project: Path, bad: list[str], said: str
) -> None:
    done = validate("--config", "job", *bad, cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "usage: titan-validate --config NAME" in done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / "imported.marker").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        ["--training.steps", "5", "--debug.seed", "-1"],
        ["--training.steps=5"],
        ["--dump-folder", "out", "--hf_assets_path", "assets"],  # top-level fields
    ],
)
def test_overrides_still_reach_the_function(project: Path, overrides: list[str]) -> None:
    """What the refusal lets through: ``--section.field VALUE`` overrides (negative values
    too) and top-level fields (a Trainer subclass's config may have its own)."""
    done = validate("--config", "job", *overrides, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (project / "imported.marker").exists()


@pytest.mark.parametrize("mode", [["config_registry.py"], ["--config", "job"]])
@pytest.mark.parametrize(
    "value", ["1e308", "inf", "-inf", "nan", "-1", "0", "86401", "9" * 400, "soon"]
)
def test_a_timeout_that_is_no_sane_number_of_seconds_is_a_usage_error(
    project: Path, mode: list[str], value: str
) -> None:
    done = validate(*mode, f"--timeout={value}", cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "expected a positive number of seconds up to 86400" in done.stderr, done.stderr
    assert "internal error" not in done.stderr
    assert not (project / "imported.marker").exists()


@pytest.mark.parametrize(
    "size", ["99999999999999999999999TiB", "100000TiB", "70000000000000000000"]
)
def test_a_memory_limit_beyond_any_address_space_is_a_usage_error(project: Path, size: str):
    done = validate("config_registry.py", "--memory-limit", size, cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is more than any address space" in done.stderr, done.stderr
    assert not (project / "imported.marker").exists()


READS = {
    "sys.stdin.read()": "sys.stdin.read()",
    "input()": "input()",
    "os.read(0, 100)": "os.read(0, 100)",
    "a program reading stdin": (
        "subprocess.run([sys.executable, '-c', 'import sys; print(len(sys.stdin.read()))'], "
        "capture_output=True, text=True).stdout"
    ),
}


@pytest.mark.parametrize("mode", [["--no-cache", "config_registry.py"], ["--config", "job"]])
@pytest.mark.parametrize("how", list(READS))
def test_registry_code_reading_stdin_finds_it_empty(tmp_path: Path, mode: list[str], how: str):
    """titan's standard input is a pipe no one writes to nor closes: code that read it would
    wait for ever, so what the module read is proof that it was given end of file."""
    source = MODULE.replace(
        "def job() -> Trainer.Config:\n",
        "def job() -> Trainer.Config:\n"
        "    import subprocess, sys\n"
        "    try:\n"
        f"        got = repr({READS[how]})\n"
        "    except EOFError:\n"
        "        got = 'EOF'\n"
        "    open('read.txt', 'w').write(got)\n",
    )
    (tmp_path / "config_registry.py").write_text(source)
    reader, writer = os.pipe()
    try:
        done = validate(*mode, cwd=tmp_path, stdin=reader)
    finally:
        os.close(reader)
        os.close(writer)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "read.txt").read_text() in ("''", "b''", "'0\\n'", "EOF")
