"""Build migrated modules in the upstream environment: one run of ``build_runner.py`` for many.

Every upstream test that needs built configs goes through :func:`build`, so the runner is
started the same way (from the repository root, where relative paths of the legacy configs
resolve, and with its errors shown when it fails).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("build_runner.py")


def build(
    upstream_python: Path,
    modules: Sequence[Path],
    result: Path,
    *,
    timeout: float,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``{module path: {"error": ..., "functions": {name: {"config" | "error": ...}}}}``.

    ``command`` replaces ``build_runner.py`` (a wrapper that calls it with more to dump); it gets
    the result path and the modules as its arguments, as the runner does."""
    argv = [str(upstream_python), *(command or [str(RUNNER)]), str(result)]
    run = subprocess.run(
        [*argv, *(str(m) for m in modules)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(result.read_text(encoding="utf-8"))
