"""Time ``titan-migrate`` on the whole upstream corpus, against a named baseline in the same run.

Target: migrating the corpus (23 TOMLs into one module) takes under 0.5 s, and never imports
torch. Three lines:

- ``titan-migrate corpus/*.toml``: the console script, a fresh process, as a user runs it;
- ``in-process``: the same migration inside a warm process (plans + code, no startup);
- ``baseline: python -c pass``: the interpreter's own startup, so the ratio reads as "how many
  empty Pythons does a migration cost".

Each run also asserts that the migrating process never imported torch.

    .venv/bin/python bench/migrate_corpus.py [--repeat N] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"
PROBE = (
    "import sys, io\n"
    "from titan.cli import migrate\n"
    "status = migrate.run(sys.argv[1:], stdout=io.StringIO(), stderr=io.StringIO())\n"
    "assert 'torch' not in sys.modules, 'torch was imported'\n"
    "sys.exit(0 if status in (0, 1) else status)\n"
)


def _time(command: list[str], repeat: int, env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, cwd=REPO, env=env)
        times.append(time.perf_counter() - start)
        # 1 is "migrated with findings" (the corpus has a stale converter name): still a run.
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr!r}")
    return times


def _in_process(files: list[str], repeat: int) -> list[float]:
    sys.path.insert(0, str(REPO))
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.plan.build import build_plan

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        render_module([build_plan(f) for f in files])
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args()
    files = sorted(str(p) for p in args.corpus.rglob("*.toml"))
    if not files:
        raise SystemExit(f"no TOML files under {args.corpus}")
    with tempfile.TemporaryDirectory() as cache:
        return _run(files, args.repeat, cache)


def _run(files: list[str], repeat: int, cache: str) -> int:
    env = dict(os.environ)
    # A private, warm bytecode cache: what a user has after `pip install` (this environment sets
    # PYTHONDONTWRITEBYTECODE, which would recompile titan's sources on every run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = cache
    script = [sys.executable, "-c", PROBE, *files]
    baseline_command = [sys.executable, "-c", "pass"]
    _time(script, 1, env)  # warm the caches for both sides
    results = {
        f"titan-migrate ({len(files)} files)": _time(script, repeat, env),
        "in-process (plans + code)": _in_process(files, repeat),
        "baseline: python -c pass": _time(baseline_command, repeat, env),
    }
    baseline = min(results["baseline: python -c pass"])
    print(f"{'command':<30} {'best s':>8} {'median s':>9} {'vs baseline':>12}")
    for name, times in results.items():
        best = min(times)
        print(f"{name:<30} {best:>8.3f} {statistics.median(times):>9.3f} {best / baseline:>11.2f}x")
    best = min(results[f"titan-migrate ({len(files)} files)"])
    verdict = "met" if best < 0.5 else "NOT met"
    print(f"target: the corpus under 0.5 s, torch never imported: {verdict} ({best:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
