"""Running titan-validate in-process or as a process, with its output captured."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from titan.cli.validate import run


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def validate(*args: object) -> Result:
    """``titan-validate ARGS`` in this process; returns exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in args], stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


PROCESS_SAFETY_S = 120
"""How long a titan process started by ``module_process`` may take before the test calls it hung: a guard only,
far beyond any check's time on a loaded machine."""


def module_process(
    module: str, *args: str, cwd: Path, env: dict[str, str] | None = None, stdin=subprocess.DEVNULL
) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` as its own cold process in ``cwd`` with ``env`` (default: this
    one's), waited for, reading ``stdin`` (nothing by default)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        stdin=stdin,
        timeout=PROCESS_SAFETY_S,
    )


def validate_process(
    *args: str, cwd: Path, cache: Path | None = None, stdin=subprocess.DEVNULL
) -> subprocess.CompletedProcess:
    """``titan-validate ARGS`` as its own process in ``cwd``, waited for; ``cache`` is its
    ``TITAN_CACHE_DIR`` (None: the user's), ``stdin`` what it reads (nothing by default)."""
    env = dict(os.environ)
    if cache is not None:
        env["TITAN_CACHE_DIR"] = str(cache)
    return module_process("titan.cli.validate", *args, cwd=cwd, env=env, stdin=stdin)


def findings(result: Result) -> list[tuple]:
    """(code, file, line, col) of every finding in a JSON report."""
    return [(d["code"], d["file"], d["line"], d["col"]) for d in result.json()["diagnostics"]]


def write(tmp_path, name: str, text: str, *, encoding: str = "utf-8"):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def codes(result: Result) -> list[str]:
    return [d["code"] for d in result.json()["diagnostics"]]


def only(items: Sequence):
    assert len(items) == 1, items
    return items[0]


LEGACY_CONFIGS = Path(__file__).resolve().parents[1] / "legacy_configs"


def legacy_tomls() -> list[Path]:
    """The project's own legacy job TOMLs, sorted (``legacy_configs/pyproject.toml``, the
    project declaration that says when they were written, is not one)."""
    return sorted(p for p in LEGACY_CONFIGS.rglob("*.toml") if p.name != "pyproject.toml")


def legacy_config_count() -> int:
    """How many files ``titan-validate legacy_configs`` checks: every job TOML there and the
    registry module of the custom-module examples (the other Python files are extensions)."""
    return len(legacy_tomls()) + len(list(LEGACY_CONFIGS.rglob("config_registry.py")))
