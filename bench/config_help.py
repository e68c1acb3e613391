"""Time the typed ``--help`` of a registry config against importing torch, in the same run.

``titan-validate --config llama3_8b --help`` builds the same tyro parser ``titan-train`` will use
(every ``--section.field`` flag with its docstring), so it measures the config help a user waits
for. Target: under 2 s. The baseline is ``python -c "import torch"``: what any torch-importing CLI
pays before it can print anything; titan's config tree never imports torch, so the ratio shows
how much of that cost the help avoids. A third line times checking the config (no ``--help``).

    .venv/bin/python bench/config_help.py [--repeat N] [--config NAME]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _time(command: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, cwd=REPO)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr!r}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--config", default="llama3_8b")
    args = parser.parse_args()
    validate = str(BIN / "titan-validate")
    runs = {
        "titan config --help": [validate, "--config", args.config, "--help"],
        "titan-validate --config": [validate, "--config", args.config],
        "baseline: import torch": [sys.executable, "-c", "import torch"],
    }
    _time(runs["baseline: import torch"], 1)  # warm the file cache for both sides
    results = {name: _time(command, args.repeat) for name, command in runs.items()}
    baseline = min(results["baseline: import torch"])
    print(f"{'command':<28} {'best s':>8} {'median s':>9} {'vs baseline':>12}")
    for name, times in results.items():
        best = min(times)
        print(f"{name:<28} {best:>8.3f} {statistics.median(times):>9.3f} {best / baseline:>11.2f}x")
    help_best = min(results["titan config --help"])
    verdict = "met" if help_best < 2.0 else "NOT met"
    print(f"target: --help under 2 s: {verdict} ({help_best:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
