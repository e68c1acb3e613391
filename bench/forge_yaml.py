"""What reading a Forge app config costs ``titan-validate`` against the TOML holding the same sections.

Three files, each checked by a fresh ``titan-validate`` process (as CI and pre-commit run it), best
and median of ``--repeat`` runs after one warm-up, with warm bytecode caches:

- baseline: ``legacy_configs/llama3/debug_model.toml``;
- ``app.yaml``: the same sections under ``trainer:`` of a GRPO-shaped app config (policy,
  services, ``${...}`` interpolations; ``tests/data/forge/grpo_qwen3.yaml``'s other keys);
- ``bomb.yaml``: an alias bomb (10^9 nodes expanded) before the same ``trainer:``: refused after
  counting, never expanded;
- ``large.yaml``: the same ``trainer:`` and 10 MB of plain keys (no anchors): refused by its size
  before PyYAML's parser reads it (it took minutes, then was called an alias bomb).

Printed: each file's times and its ratio to the baseline (the YAML pays for PyYAML's pure-Python
parser, which Forge's OmegaConf loader uses too).

    .venv/bin/python bench/forge_yaml.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TOML = REPO / "legacy_configs" / "llama3" / "debug_model.toml"
APP = REPO / "tests" / "data" / "forge" / "grpo_qwen3.yaml"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
    for i in range(8)
)


def _times(path: Path, repeat: int, env: dict[str, str]) -> list[float]:
    """Seconds of ``titan-validate PATH`` per run, after one warm-up run."""
    command = [sys.executable, "-m", "titan.cli.validate", str(path)]
    subprocess.run(command, capture_output=True, cwd=REPO, env=env)
    found = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, cwd=REPO, env=env)
        found.append(time.perf_counter() - start)
    return found


def _large(trainer: str) -> str:
    """10 MB of plain keys after ``trainer``: no anchors, no aliases."""
    return trainer + "extra:\n" + "".join(f"  key_{i}: value number {i}\n" for i in range(330_000))


def main() -> None:
    """Write the three YAML files, time the three checks, print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with open(TOML, "rb") as f:
        sections = tomllib.load(f)
    rest = yaml.safe_load(APP.read_text())
    rest["trainer"] = sections
    with tempfile.TemporaryDirectory() as tmp:
        app, bomb, large = (Path(tmp) / f"{n}.yaml" for n in ("app", "bomb", "large"))
        app.write_text(yaml.safe_dump(rest, sort_keys=False))
        bomb.write_text(BOMB + yaml.safe_dump({"trainer": sections}))
        large.write_text(_large(yaml.safe_dump({"trainer": sections})))
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")}
        env["PYTHONPATH"] = str(REPO)
        base = _times(TOML, args.repeat, env)
        print(f"{'file':<20} {'best':>9} {'median':>9} {'ratio (best)':>13}")
        files = (("debug_model.toml", TOML), ("app.yaml", app), ("bomb.yaml", bomb))
        for name, path in (*files, ("large.yaml (10 MB)", large)):
            found = base if path == TOML else _times(path, args.repeat, env)
            print(
                f"{name:<20} {min(found) * 1e3:8.1f}ms {statistics.median(found) * 1e3:8.1f}ms "
                f"{min(found) / min(base):12.2f}x"
            )


if __name__ == "__main__":
    main()
